"""The supervisor process: it binds, starts, watches, replaces and drains the others (process),
and holds what serves that job (restarts, lifeline, sd_notify, proctitle, banner, exporter)."""
