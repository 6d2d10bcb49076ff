"""The dashboard's widgets: told what to show, they do no I/O."""
