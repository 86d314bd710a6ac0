"""SQLAlchemy (its compiled result and row types): an in-memory SQLite engine, a table, rows, an event callback."""

from typing import Any

MODULES = ("sqlalchemy",)


def hook(module: Any) -> list[Any]:
    engine = module.create_engine("sqlite://")
    module.event.listen(engine, "connect", lambda conn, record: None)
    with engine.connect() as connection:
        rows = connection.execute(module.text("select 1 as a, 'x' as b")).fetchall()
    return [engine, rows]
