"""What the notebooks call: parameters and outputs (glue), tables, figures, widgets."""
