/**
 * The block device behind a directory, for benches that count the bytes a
 * device really wrote (field 7 of its `stat`).
 *
 * @module
 */

import fs from "node:fs";
import path from "node:path";

/**
 * The `stat` file of the block device holding `directory`: the mount with
 * the longest mount point that contains it, from `/proc/self/mountinfo`,
 * gives `MAJ:MIN`; `/sys/dev/block/MAJ:MIN/stat` is its counter file.
 */
export function deviceStatFile(
  directory: string,
): { device: string; statPath: string } | undefined {
  let mountinfo: string;
  try {
    mountinfo = fs.readFileSync("/proc/self/mountinfo", "utf8");
  } catch {
    return undefined;
  }
  const real = fs.realpathSync(directory);
  let best: { mountPoint: string; majorMinor: string } | undefined;
  for (const line of mountinfo.split("\n")) {
    const fields = line.split(" ");
    const majorMinor = fields[2];
    const mountPoint = fields[4]?.replace(/\\040/g, " ");
    if (majorMinor === undefined || mountPoint === undefined) continue;
    const inside = mountPoint === "/" || real === mountPoint ||
      real.startsWith(`${mountPoint}/`);
    if (inside && (best === undefined || mountPoint.length >= best.mountPoint.length)) {
      best = { mountPoint, majorMinor };
    }
  }
  if (best === undefined) return undefined;
  const statPath = `/sys/dev/block/${best.majorMinor}/stat`;
  if (!fs.existsSync(statPath)) return undefined;
  let device = best.majorMinor;
  try {
    device = `${path.basename(fs.realpathSync(`/sys/dev/block/${best.majorMinor}`))} (${device})`;
  } catch {
    // Keep MAJ:MIN.
  }
  return { device, statPath };
}
