"""PostgresStore, for many hosts sharing one store: the store (``store``), its schema and
upgrades (``schema``), its statements (``sql``), connections (``connect``), retries while
the server is away (``retry``), change notices (``feed``), agent memory (``memory``) and its
evidence table (``evidence``). psycopg is imported only when a store is opened."""
