"""Strategy search: enumerate the layouts a cluster allows and rank them by the priced objective."""
