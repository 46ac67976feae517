"""Every setting: each option declared once (options), read from flags, the environment and
the TOML file (file, found, resolve, authentication, jwt/), judged (check), printed
(printing), re-read on SIGHUP (reload), and the limits and TLS context they give (capacity, tls)."""
