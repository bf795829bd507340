"""`floe lint` of the iceberg output, through the binary (issue 37, item 4): a value of the
wrong YAML type is named with its field path and hides none of the section's other
problems, enum errors name the field and its options, unknown fields suggest the closest
name, a section that is not an object is named, and every line points at the offending
field's line and column. `floe run` refuses the same configs, naming every problem."""
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLOE = os.path.join(ROOT, "go-shim", "cmd", "floe", "floe")

HEAD = "input:\n  stdin: {}\noutput:\n  iceberg:\n    namespace: a\n"  # the section starts on line 5

# name: (the section's lines after `namespace: a`, the lines floe's check prints)
CASES = {
    "word for an integer": ("    table: t\n    max_in_flight: four\n",
                            ['(7,5) max_in_flight: expected an integer, got "four"']),
    "a bad type hides nothing": (
        "    table: a/b\n    commit:\n      max_snapshots: 0\n      max_retries: x\n",
        ['(6,5) table name "a/b" holds a path separator',
         "(8,7) commit.max_snapshots must be greater than 0",
         '(9,7) commit.max_retries: expected an integer, got "x"']),
    "enum": ("    table: t\n    parquet:\n      compression: zip\n",
             ['(8,7) parquet.compression: expected one of "", zstd, snappy, lz4, gzip or uncompressed, '
              'got "zip"; did you mean gzip?']),
    "unknown field": ("    table: t\n    namespce: x\n",
                      ["(7,5) field namespce is not a field of the iceberg output; did you mean namespace?"]),
    "section not an object": ("    table: a/b\n    commit: 5\n    catalog: [1]\n    max_in_flight: four\n",
                              ['(6,5) table name "a/b" holds a path separator',
                               "(7,5) commit: expected an object, got 5",
                               "(8,5) catalog: expected an object, got a list",
                               '(9,5) max_in_flight: expected an integer, got "four"']),
    "boolean and fraction": ("    table: t\n    schema_evolution:\n      enabled: maybe\n    parquet:\n      page_size: 1.5\n",
                             ['(8,7) schema_evolution.enabled: expected a boolean (true or false), got "maybe"',
                              "(10,7) parquet.page_size: expected an integer, got 1.5"]),
}


def lint(path):
    return subprocess.run([FLOE, "lint", str(path)], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("name", sorted(CASES))
def test_lint_names_every_problem_at_its_line(tmp_path, name):
    section, want = CASES[name]
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(HEAD + section)
    res = lint(cfg)
    assert res.returncode == 1, res.stderr
    # floe's lines, in line order; Benthos' own lines (at column 1: "field namespce not
    # recognised", "value zip is not a valid option for this field", ...) follow.
    ours = [line[len(str(cfg)):] for line in res.stderr.splitlines() if ",1) " not in line]
    assert ours == want, res.stderr


def test_each_line_once_and_a_clean_section_passes(tmp_path):
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(HEAD + "    table: a/b\n    commit:\n      max_snapshots: 0\n")
    res = lint(cfg)
    assert res.returncode == 1 and res.stderr.count("must be greater than 0") == 1, res.stderr
    cfg.write_text(HEAD + "    table: t\n    max_in_flight: 4\n")
    res = lint(cfg)
    assert res.returncode == 0 and res.stdout + res.stderr == "", res.stdout + res.stderr


def test_run_refuses_the_config_naming_every_problem(tmp_path):
    cfg = tmp_path / "pipeline.yaml"
    cfg.write_text(HEAD + "    table: a/b\n    max_in_flight: four\n    commit:\n      max_snapshots: 0\n")
    res = subprocess.run([FLOE, "run", str(cfg)], capture_output=True, text=True, timeout=60,
                         stdin=subprocess.DEVNULL, cwd=tmp_path)
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    for text in ['max_in_flight: expected an integer, got \\"four\\"', "commit.max_snapshots must be greater than 0",
                 'table name \\"a/b\\" holds a path separator']:
        assert text in out, out
    assert not (tmp_path / "warehouse").exists()
