"""The checks a package of modules (tensortools.types.scalar, tensortools.types.metadata)
keeps to: each module imports alone, imports point one way, no private name crosses a
module border; and the imports of tensortools' modules among themselves (the layers of
test_layers.py). Read from the source (ast), wherever an import stands."""

from __future__ import annotations

import ast
import concurrent.futures
import graphlib
import pathlib
import subprocess
import sys


def imports(path: pathlib.Path) -> list[tuple[str, list[str]]]:
    """(module, names imported from it) for each absolute import in the file, wherever it
    stands (in a function too)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.append((node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            found += [(a.name, []) for a in node.names]
    return found


class Package:
    def __init__(self, prefix: str, folder: pathlib.Path) -> None:
        self.prefix, self.folder = prefix, folder
        self.modules = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")

    def sibling_imports(self, module: str) -> list[tuple[str, list[str]]]:
        """(sibling module, names imported from it) for each import of the package's own
        modules in `module`'s source, wherever it stands (in a function too)."""
        prefix, found = self.prefix, []
        for name, names in imports(self.folder / f"{module}.py"):
            if name == prefix:  # from <package> import a, b
                found += [(n, []) for n in names]
            elif name.startswith(prefix + "."):
                found.append((name.removeprefix(prefix + "."), names))
        return found

    def import_graph(self) -> dict[str, set[str]]:
        """module -> the siblings it imports; fails where an import names no module of the
        package or where the imports go round in a cycle."""
        graph = {m: {name for name, _ in self.sibling_imports(m)} for m in self.modules}
        for module, targets in graph.items():
            assert targets <= set(self.modules), f"{module} imports {targets - set(self.modules)}"
        assert_no_cycle(graph, "import cycle")
        return graph

    def private_crossings(self) -> list[str]:
        return [
            f"{module} imports {name} from {source}"
            for module in self.modules
            for source, names in self.sibling_imports(module)
            for name in names
            if name.startswith("_")
        ]

    def failing_alone(self, smoke: str) -> dict[str, str]:
        """module -> stderr, for each module that, imported first in a fresh interpreter
        (two at a time), fails the `smoke` code after it (which prints "ok")."""

        def imports_alone(module: str) -> str:
            code = f"import {self.prefix}.{module} as m, torch\n{smoke}"
            run = subprocess.run(
                [sys.executable, "-c", code], capture_output=True, text=True, timeout=300
            )
            ok = run.returncode == 0 and run.stdout.strip() == "ok"
            return "" if ok else run.stderr[-2000:]

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            results = pool.map(imports_alone, self.modules)
            return {m: err for m, err in zip(self.modules, results) if err}


def assert_no_cycle(graph: dict[str, set[str]], what: str) -> None:
    """Fails where the graph (node -> the nodes it points to) goes round: no topological
    order exists; the message names the cycle."""
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as err:
        raise AssertionError(f"{what}: {' -> '.join(err.args[1])}") from None


def module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    """The dotted name of the module at `path` in the package folder `root`."""
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolved(root: pathlib.Path, module: str, names: list[str]) -> list[str]:
    """The modules of the package that `from module import names` reaches: a name that is
    a submodule (``from tensortools import ops``) counts as that module."""
    folder = root.parent.joinpath(*module.split("."))
    found = [
        f"{module}.{n}"
        for n in names
        if (folder / n).is_dir() or (folder / f"{n}.py").is_file() or n == "_C"
    ]
    return found if found and len(found) == len(names) else [module, *found]


def import_graph(root: pathlib.Path) -> dict[str, set[str]]:
    """module -> the modules of the same package it imports, for every module under `root`
    (a package folder), wherever the import stands (in a function too)."""
    top = root.name
    graph = {}
    for path in sorted(root.rglob("*.py")):
        targets: set[str] = set()
        for module, names in imports(path):
            if module == top or module.startswith(top + "."):
                targets.update(_resolved(root, module, names))
        graph[module_name(root, path)] = targets
    return graph
