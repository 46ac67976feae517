"""The commands a person runs: `mur-gateway` (cli), `mur-gateway token new` and the container's health check."""
