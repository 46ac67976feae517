"""`[network.authentication.jwt]` as the configuration knows it, in one place.

- `settings`: the table's values that name no key (the algorithm names, `jwks_url`), which
  every configuration's declarations read (gateway/config/options.py `Jwt`), so they load
  no PyJWT;
- `keys`: the key file read, its key or JWKS fitted to the algorithms (`key_set`, `KeySet`),
  what --check, the start, a reload, the sequencer's fetch (gateway/sequencer/jwks.py) and
  each worker's verifier (gateway/worker/door/jwt/) prepare their keys with;
- `table`: the TOML table read, its key checked, as `Config.jwt`.

PyJWT and `cryptography` are imported only when a key is checked or prepared: a gateway
without the table never loads them (about 11 MiB in each of its processes, RESULTS run 12).
"""
