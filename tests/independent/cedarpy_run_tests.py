"""Runs cedargate's policy tests (Cedar CLI `run-tests` format) with cedarpy,
an independent Cedar implementation binding, and prints one JSON object per
test: {"file", "name", "decision", "reasons", "num_errors"}.

Usage: cedarpy_run_tests.py SCHEMA_FILE POLICIES_DIR
Policies are re-keyed by their @id annotation, as cedargate and the Cedar CLI do.
"""

import glob
import json
import os
import sys

import cedarpy


def policy_set(policies_dir):
    static = {}
    for path in sorted(glob.glob(os.path.join(policies_dir, "*.cedar"))):
        with open(path, encoding="utf-8") as f:
            parsed = json.loads(cedarpy.policies_to_json_str(f.read()))
        for est in parsed["staticPolicies"].values():
            static[est["annotations"]["id"]] = est
    doc = {"staticPolicies": static, "templates": {}, "templateLinks": []}
    return cedarpy.PolicySet.from_json_str(json.dumps(doc))


def main():
    schema_file, policies_dir = sys.argv[1], sys.argv[2]
    with open(schema_file, encoding="utf-8") as f:
        schema = cedarpy.Schema.from_str(f.read()) if hasattr(cedarpy.Schema, "from_str") else f.read()
    policies = policy_set(policies_dir)
    tests_dir = os.path.join(policies_dir, "tests")
    for path in sorted(glob.glob(os.path.join(tests_dir, "*.json"))):
        with open(path, encoding="utf-8") as f:
            cases = json.load(f)
        for index, case in enumerate(cases):
            entities = case["entities"]
            if isinstance(entities, str):
                with open(os.path.join(tests_dir, entities), encoding="utf-8") as f:
                    entities = json.load(f)
            result = cedarpy.is_authorized(case["request"], policies, entities, schema)
            print(json.dumps({
                "file": os.path.basename(path),
                "name": case.get("name", f"#{index}"),
                "decision": "allow" if result.allowed else "deny",
                "reasons": sorted(result.diagnostics.reasons),
                "num_errors": len(result.diagnostics.errors),
            }))


if __name__ == "__main__":
    main()
