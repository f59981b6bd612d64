"""The ground floor: the plan, the model and hardware it names, the device layout, the DAG and its working form,
building it, and the per-GPU memory account. Everything above reads these; they import nothing above them."""
