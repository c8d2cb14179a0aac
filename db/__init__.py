"""The PTXBench store (SQLite through sqlite-utils); docs/store.md describes it.

store (open, migrate, errors), records (the row dataclasses), writes, queries,
metrics, seed; browse holds the explorer's listings. Nothing outside this
package writes SQL.
"""
