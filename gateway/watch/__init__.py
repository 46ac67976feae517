"""`mur watch`: the terminal client of a session's stream (client) and how it prints events (printer)."""
