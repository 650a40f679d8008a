"""How trials are named and tagged: ``<index>_<param>=<value>,...`` from the searched
parameters, shortened so that a tag stays readable in listings and directory names."""

from __future__ import annotations

from typing import Any, Dict

def searched(value: Any) -> bool:
    from engine.tune.search import Domain, is_grid

    return is_grid(value) or isinstance(value, Domain)


def short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    text = str(value)
    return text if len(text) <= 20 else text[:17] + "..."


def trial_tag(index: int, params: Dict[str, Any]) -> str:
    if not params:
        return str(index)
    return f"{index}_" + ",".join(f"{k.rsplit('/', 1)[-1]}={short(v)}"
                                  for k, v in params.items())
