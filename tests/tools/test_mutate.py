#!/usr/bin/env python3
"""test_mutate.py — unit tests of the mutation runner, tools/labkit/mutate.py.

The mutants it makes from small solution regions written here: which
mutations each operator makes, what it leaves alone (comments, strings,
declarations, commuting arguments), how statements that span lines are
handled, and that ids and the smoke choice are stable. No build is needed
(the runner's build-and-run half is exercised by the mutation_smoke test).
Run: python3 tests/tools/test_mutate.py
"""
import sys
import unittest
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.dont_write_bytecode = True
sys.path.insert(0, str(REPO_ROOT / "tools" / "labkit"))
import mutate  # noqa: E402  (the module under test)


def region(body):
    """A file with one lab05 solution region around `body` (lines, 4-space indent)."""
    lines = ["// test.cpp", "void f() {", "    // BEGIN SOLUTION lab05", "    // HINT: a hint"]
    lines += ["    " + line for line in body]
    lines += ["    // END SOLUTION", "}", ""]
    return "\n".join(lines)


def mutants(body):
    return mutate.file_mutants("lab05", "test.cpp", region(body))


def described(body):
    return sorted((m.operator, m.mutated) for m in mutants(body))


class TestOperators(unittest.TestCase):

    def test_relational_and_its_bound(self):
        got = described(["if (a < n) x = 1;"])
        self.assertIn(("relational", "if (a <= n) x = 1;"), got)
        self.assertIn(("bound", "if (a < (n) - 1) x = 1;"), got)
        self.assertIn(("negate", "if (!(a < n)) x = 1;"), got)
        got = described(["while (a >= b + c && ok) {"])
        self.assertIn(("relational", "while (a > b + c && ok) {"), got)
        self.assertIn(("bound", "while (a >= (b + c) + 1 && ok) {"), got)

    def test_integer_literals_grow_by_one_but_not_floats_or_hex(self):
        got = described(["y = x * 16 + 0.5f + 0x0F;"])
        bounds = [text for op, text in got if op == "bound"]
        self.assertEqual(bounds, ["y = x * 17 + 0.5f + 0x0F;"])

    def test_shifts_and_templates_are_not_comparisons(self):
        got = described(["y = a << 2;", "v = std::vector<int>(n);"])
        self.assertFalse([m for m in got if m[0] == "relational"])

    def test_front_back_and_push_pop(self):
        got = described(["waiting_.push_front(&r);", "Request* v = running_.back();"])
        self.assertIn(("front/back", "waiting_.push_back(&r);"), got)
        self.assertIn(("front/back", "Request* v = running_.front();"), got)

    def test_two_argument_calls_swap_unless_they_commute(self):
        got = described(["copy(a, b);", "z = std::min(a, b);", "w = _mm256_add_ps(p, q);",
                         "three(a, b, c);"])
        swaps = [text for op, text in got if op == "swap"]
        self.assertEqual(swaps, ["copy(b, a);"])

    def test_statements_are_deleted_but_declarations_and_returns_are_not(self):
        got = described(["budget -= n;", "out.push_back(x);", "const int64_t k = n;",
                         "std::vector<float> v(n);", "return k;", "break;"])
        deleted = sorted(m.original for m in mutants(
            ["budget -= n;", "out.push_back(x);", "const int64_t k = n;",
             "std::vector<float> v(n);", "return k;", "break;"]) if m.operator == "delete")
        self.assertEqual(deleted, ["break;", "budget -= n;", "out.push_back(x);"])
        self.assertTrue(all(text == "// (deleted by mutate.py)" for op, text in got
                            if op == "delete"))

    def test_comments_and_strings_are_left_alone(self):
        got = described(['log("a < b");  // i < n', "x = 1;"])
        self.assertFalse([m for m in got if m[0] == "relational"])

    def test_a_statement_over_several_lines_is_one_statement(self):
        found = mutants(["const bool empty =", "    all_of(a, b);", "x = 1;"])
        deletes = [m.original for m in found if m.operator == "delete"]
        self.assertEqual(deletes, ["x = 1;"], "the declaration over two lines is not deleted")
        swaps = [m for m in found if m.operator == "swap"]
        self.assertEqual(len(swaps), 1)
        self.assertIn("all_of(b, a)", swaps[0].text)

    def test_a_block_opener_ends_a_statement(self):
        found = mutants(["parallel_for(n, [&](int64_t i) {", "    y[i] = x[i];", "});"])
        self.assertTrue(any(m.operator == "delete" and m.original == "y[i] = x[i];"
                            for m in found))

    def test_only_the_solution_region_is_mutated(self):
        text = region(["x = 1;"]).replace("void f() {", "void f() {\n    if (a < b) g();")
        found = mutate.file_mutants("lab05", "test.cpp", text)
        self.assertEqual({m.original for m in found}, {"x = 1;"})
        self.assertEqual(mutate.file_mutants("lab06", "test.cpp", text), [])


class TestIdsAndChoice(unittest.TestCase):

    def test_ids_do_not_depend_on_line_numbers(self):
        body = ["if (a < n) x = 1;", "y = 2;"]
        before = mutate.assign_ids(mutants(body))
        moved = region(body).replace("// test.cpp", "// test.cpp\n// one more line above")
        after = mutate.assign_ids(mutate.file_mutants("lab05", "test.cpp", moved))
        self.assertEqual([m.id for m in before], [m.id for m in after])
        self.assertNotEqual([m.line for m in before], [m.line for m in after])

    def test_lab_mutants_have_unique_ids(self):
        for lab in ("lab05", "lab08"):
            found = mutate.lab_mutants(lab)
            self.assertTrue(found, lab)
            self.assertEqual(len({m.id for m in found}), len(found), lab)

    def test_the_smoke_choice_is_spread_and_deterministic(self):
        items = list(range(10))
        self.assertEqual(mutate.smoke_choice(items, 2), [2, 7])
        self.assertEqual(mutate.smoke_choice(items, 2), mutate.smoke_choice(items, 2))
        self.assertEqual(mutate.smoke_choice(items[:1], 2), [0])

    def test_equivalent_mutants_are_read_from_the_readme(self):
        ids = mutate.equivalent_ids()
        self.assertTrue(all(len(key) == 8 for key in ids))
        self.assertTrue(ids, "tests/labs/README.md lists the argued equivalent mutants")

    def test_a_mutant_is_compiled_without_the_exercise_file_marker(self):
        # The marker says "the reference version of this file is linked", which
        # turns fusions on around it: a mutant must not say so.
        command = ["c++", "-DA=1", '-DSERVELAB_EXERCISE_FILE="kernels/cpu/rmsnorm.cpp"', "-O2",
                   "-include", "/repo/reference/common/exercise_file_marker.h",
                   "-include", "/repo/other.h", "-c", "rmsnorm.cpp"]
        self.assertEqual(mutate.without_exercise_marker(command),
                         ["c++", "-DA=1", "-O2", "-include", "/repo/other.h", "-c", "rmsnorm.cpp"])


if __name__ == "__main__":
    unittest.main()
