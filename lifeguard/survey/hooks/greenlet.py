"""greenlet: greenlets left suspended in the middle of their function (a program's pending coroutines), one
finished, and a switch back and forth."""

from typing import Any

MODULES = ("greenlet",)


def hook(module: Any) -> list[Any]:
    def waiter(value: int) -> int:
        while True:
            value = module.getcurrent().parent.switch(value + 1)

    suspended = [module.greenlet(waiter) for _ in range(3)]
    for number, item in enumerate(suspended):
        item.switch(number)  # each is now paused inside waiter, with a frame of its own
    finished = module.greenlet(lambda: 42)
    finished.switch()
    return [suspended, finished]
