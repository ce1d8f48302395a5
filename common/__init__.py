"""The foundation's lowest floor: what every party shares on the wire and in serving.

``common.wire`` holds the typed REST bodies (both ends import the same definitions, so the
OpenAPI documents are the contract); ``common.serving`` the servers' shared plumbing
(durable SQLite, a bounded background worker, error shape, body limit);
``common.files`` atomic private files (the servers' and the client agent's);
``common.credentials`` the one way a bearer token is issued, stored and checked. Only
``serving`` and ``credentials`` import the web framework (``wire`` builds its path-parameter
types on first use), so the client agent runs without it. It imports no other package of
this project.
"""
