"""One process of the drain floor in bench/throughput.py: the shared peer bench's floor-batch100
worker (claim 100 jobs of a minimal lease table per round trip, acknowledge them in one
statement), run until the table is drained. Imports only psycopg, so its start-up is as short as
the shared floor's."""

import sys

import psycopg

CLAIM = """
UPDATE bench_floor_jobs SET locked_until = now() + interval '5 min', token = gen_random_uuid(),
    attempts = attempts + 1
WHERE id IN (SELECT id FROM bench_floor_jobs WHERE run_after <= now() AND locked_until IS NULL
             ORDER BY run_after, id FOR UPDATE SKIP LOCKED LIMIT %s)
RETURNING id, token, payload"""
ACK = """
UPDATE bench_floor_jobs SET state = 'done'
WHERE (id, token) IN (SELECT * FROM unnest(%s::bigint[], %s::uuid[]))"""

if __name__ == "__main__":
    with psycopg.connect(sys.argv[1], autocommit=True) as conn:
        while rows := conn.execute(CLAIM, [100]).fetchall():
            conn.execute(ACK, [[r[0] for r in rows], [r[1] for r in rows]])
