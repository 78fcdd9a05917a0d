#!/usr/bin/env python3
"""The house rules that a reader of CONTRIBUTING.md cannot check by eye in a large tree:
no source file of the project's own over 800 lines, and no function over 80 lines, unless
a comment says why ("Long file:" in a file's first 20 lines; "Long function:" in the 6
lines above a definition). Prints each breach as path:line and exits 1 when there is one.

Functions are found by their shape, not parsed: a C++ definition is a line ending in "{"
whose text has a parameter list and is no statement (if, for, a lambda...), closed by "}"
at its own indentation; Python's come from its ast. Good enough for code formatted by the
project's .clang-format, which puts every definition's brace on its signature line.
"""
import ast
import re
import subprocess
import sys
from pathlib import Path

MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 80
CPP_SUFFIXES = (".cc", ".h", ".cu", ".cuh", ".def")
STATEMENT = re.compile(r"^\s*(if|for|while|switch|else|do|return|catch|try|case|namespace|struct|class|enum|union|"
                       r"extern|template\s*<[^>]*>\s*(struct|class))\b")
DEFINITION = re.compile(r"^(\s*)[A-Za-z_~:<>,*&\s\[\]0-9\"]*[A-Za-z_~0-9>\]]\s*\(.*\)\s*(const)?\s*(noexcept)?\s*"
                        r"(override)?\s*(->\s*[^{=]+)?\{\s*$")


def has_reason(lines, index, marker, before):
    start = max(0, index - before)
    return any(marker in line for line in lines[start:index + 1])


def cpp_functions(lines):
    """(first line index, length) of each definition that is not a statement or lambda."""
    i = 0
    while i < len(lines):
        line = lines[i]
        match = DEFINITION.match(line)
        if not match or STATEMENT.match(line) or "[" in line.split("(")[0] or "=" in line.split("(")[0]:
            i += 1
            continue
        indent = match.group(1)
        first = i
        if line.lstrip().startswith(":") and i > 0:  # a constructor's initializers: its signature is above
            first = i - 1
            indent = re.match(r"^\s*", lines[first]).group(0)
        close = re.compile("^" + re.escape(indent) + r"\}")
        end = i + 1
        while end < len(lines) and not close.match(lines[end]):
            end += 1
        if end < len(lines):
            yield first, end - first + 1
        i += 1


def python_functions(text):
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield first - 1, node.end_lineno - first + 1


def breaches(root):
    listed = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    for name in listed:
        path = Path(root) / name
        is_cpp = name.endswith(CPP_SUFFIXES)
        is_python = name.endswith(".py")
        if not (is_cpp or is_python) or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        lines = text.split("\n")
        comment = "//" if is_cpp else "#"
        if len(lines) - 1 > MAX_FILE_LINES and not has_reason(lines, 19, "Long file:", 19):
            yield f"{name}:1: {len(lines) - 1} lines, over {MAX_FILE_LINES}, and no '{comment} Long file:' reason"
        functions = cpp_functions(lines) if is_cpp else python_functions(text)
        for first, length in functions:
            if length > MAX_FUNCTION_LINES and not has_reason(lines, first, "Long function:", 6):
                yield (f"{name}:{first + 1}: a function of {length} lines, over {MAX_FUNCTION_LINES}, and no "
                       f"'{comment} Long function:' reason above it")


def self_test():
    """The rules find a long file and a long function in a scratch repository, in C++ and
    in Python, and accept each once its reason is written: a check that can fail."""
    import tempfile
    body = "\n".join(f"  x += {i};" for i in range(MAX_FUNCTION_LINES))
    cpp = "int f(int x) {\n" + body + "\n  return x;\n}\n" + "// filler\n" * MAX_FILE_LINES
    python = "def f(x):\n" + "".join(f"    x += {i}\n" for i in range(MAX_FUNCTION_LINES)) + "    return x\n"
    with tempfile.TemporaryDirectory() as root:
        subprocess.run(["git", "init", "-q", root], check=True)
        (Path(root) / "long.cc").write_text(cpp)
        (Path(root) / "long.py").write_text(python)
        subprocess.run(["git", "-C", root, "add", "."], check=True)
        found = list(breaches(root))
        expected = ["long.cc:1: 8", "long.cc:1: a function of", "long.py:1: a function of"]
        if len(found) != len(expected) or not all(any(f.startswith(e) for f in found) for e in expected):
            print("house_rules: the self-test found", found)
            return 1
        (Path(root) / "long.cc").write_text("// Long file: a test.\n// Long function: a test.\n" + cpp)
        (Path(root) / "long.py").write_text("# Long function: a test.\n" + python)
        if list(breaches(root)):
            print("house_rules: the self-test's reasons were not accepted:", list(breaches(root)))
            return 1
    print("house_rules: self-test passed (3 breaches found, none once their reasons were written)")
    return 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    root = sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    found = list(breaches(root))
    for line in found:
        print(line)
    print(f"house_rules: {len(found)} breach{'es' if len(found) != 1 else ''}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
