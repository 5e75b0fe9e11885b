"""The benchmarks' own PostgreSQL databases: made fresh (and migrated), dropped afterwards."""

import os
import secrets
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent

# The project refuses to start without a SECRET_KEY (config/secret_key.py): a throwaway one for
# this bench, in the environment of every process it starts and before it sets Django up.
os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(50))


SOCKET_DIR = "/var/run/postgresql"


def server_url() -> str:
    """BENCH_PG, else DATABASE_URL's server if it is PostgreSQL, else the local one: through its
    Unix socket where there is one, as the shared peer bench connects (loopback TCP cost the
    floor a sixth of its drain rate)."""
    for url in (os.environ.get("BENCH_PG"), os.environ.get("DATABASE_URL")):
        if url and urlsplit(url).scheme.startswith("postgres"):
            return urlunsplit(urlsplit(url)._replace(path="")).rstrip("/")
    if Path(SOCKET_DIR).is_dir():
        return "postgres://postgres@" + SOCKET_DIR.replace("/", "%2F")
    return "postgres://postgres@127.0.0.1:5432"


def database_url(name: str) -> str:
    return f"{server_url()}/{name}"


def recreate_database(name: str, *, migrate: bool = False) -> str:
    """Drop and create `name` (migrated if asked); returns its URL."""
    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        ident = sql.Identifier(name)
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(ident))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(ident))
    url = database_url(name)
    if migrate:
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--verbosity", "0"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": url},
            check=True,
        )
    return url


def drop_database(name: str):
    with psycopg.connect(database_url("postgres"), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
