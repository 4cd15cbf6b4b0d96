import assert from "node:assert/strict";
import { describe, test } from "node:test";
import { filterMatches, scenarioFlags } from "../bench/_harness.ts";

describe("scenario bench flags", () => {
  test("scenarioFlags() reads --json, --filter and --scale, and defaults each", () => {
    assert.deepEqual(scenarioFlags([]), { json: false, filter: "", scale: 1 });
    assert.deepEqual(
      scenarioFlags(["--filter", "^async", "--json", "--scale", "0.5"]),
      { json: true, filter: "^async", scale: 0.5 },
    );
  });

  test("scenarioFlags() refuses a misspelt flag, a flag without its value and a bad scale", () => {
    // A misspelt filter would otherwise run every scenario (tens of minutes).
    assert.throws(() => scenarioFlags(["--filer", "256p"]), /Unknown argument --filer/);
    assert.throws(() => scenarioFlags(["--filter"]), /--filter needs a value/);
    assert.throws(() => scenarioFlags(["--scale", "0"]), /--scale is 0; it must be positive/);
    assert.throws(() => scenarioFlags(["256p"]), /Unknown argument 256p/);
  });

  test("filterMatches() selects by substring, by ^prefix, and by any of |-separated alternatives", () => {
    const names = [
      "async 1 KiB 1p",
      "async 128 B 1p",
      "sync 1 KiB 256p",
      "ceiling sync 1 KiB 256p tmpfs",
    ];
    const selected = (filter: string) => names.filter((name) => filterMatches(name, filter));
    assert.deepEqual(selected("256p"), ["sync 1 KiB 256p", "ceiling sync 1 KiB 256p tmpfs"]);
    assert.deepEqual(selected("^sync"), ["sync 1 KiB 256p"]);
    assert.deepEqual(selected("^async 1 KiB 1p|^async 128 B 1p"), [
      "async 1 KiB 1p",
      "async 128 B 1p",
    ]);
    assert.deepEqual(selected("^async 1 KiB|tmpfs"), [
      "async 1 KiB 1p",
      "ceiling sync 1 KiB 256p tmpfs",
    ]);
    assert.deepEqual(selected("^1p"), []);
  });
});
