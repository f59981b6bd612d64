"""Reading a hand-drafted DAG document onto pdag's schema: its spellings, shapes, GPU ids and implicit steps."""
