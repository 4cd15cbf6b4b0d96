/**
 * The SVG chart of the comparison: throughput bars per workload and store
 * (one bar per runtime, the machine's limit on top), then ack latency
 * percentiles of the durable workloads (p50 bar, p99 whisker, log scale).
 * Plain SVG text with no dependency, so the report renders anywhere.
 *
 * @module
 */

import { describe, formatLatency, formatRate, RUNTIMES, type Summary } from "./_summary.ts";

const WIDTH = 960;
const LABEL_WIDTH = 150;
const VALUE_WIDTH = 70;
const BAR_HEIGHT = 8;
const ROW_GAP = 6;
const PANEL_GAP = 28;
const COLORS: Record<string, string> = { deno: "#2b7a78", bun: "#e0a030", node: "#6a4c93" };

function escape(text: string): string {
  return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
}

function text(x: number, y: number, content: string, attributes = ""): string {
  return `<text x="${x.toFixed(1)}" y="${y.toFixed(1)}" ${attributes}>${escape(content)}</text>`;
}

/** Groups summaries by workload (limit first, then stores), in order. */
function panels(
  summaries: readonly Summary[],
  kinds: readonly string[],
): Map<string, { title: string; rows: Map<string, Summary[]> }> {
  const result = new Map<string, { title: string; rows: Map<string, Summary[]> }>();
  for (const s of summaries) {
    if (!kinds.includes(s.spec.kind) || s.spec.peer === undefined) continue;
    const key = `${s.spec.kind}/${s.spec.producers}/${s.spec.payloadBytes}`;
    let panel = result.get(key);
    if (panel === undefined) {
      panel = { title: describe(s.spec), rows: new Map() };
      result.set(key, panel);
    }
    const row = panel.rows.get(s.spec.peer) ?? [];
    row.push(s);
    panel.rows.set(s.spec.peer, row);
  }
  // Put each panel's limit on top.
  for (const s of summaries) {
    if (s.limitId === undefined || s.spec.peer === undefined) continue;
    const key = `${s.spec.kind}/${s.spec.producers}/${s.spec.payloadBytes}`;
    const panel = result.get(key);
    const limit = summaries.find((l) => l.spec.id === s.limitId && l.runtime === s.runtime);
    if (panel === undefined || limit === undefined) continue;
    const name = `limit: ${
      limit.spec.kind === "memcpy"
        ? "memcpy"
        : limit.spec.kind === "fsync"
        ? "write+fdatasync"
        : `group commit, ${limit.spec.flushesMax ?? 1} in flight`
    }`;
    const row = panel.rows.get(name) ?? [];
    if (!row.some((r) => r.runtime === limit.runtime)) row.push(limit);
    panel.rows.set(name, row);
  }
  for (const panel of result.values()) {
    const limits = [...panel.rows].filter(([name]) => name.startsWith("limit"));
    const stores = [...panel.rows].filter(([name]) => !name.startsWith("limit"));
    panel.rows = new Map([...limits, ...stores]);
  }
  return result;
}

/** The chart as an SVG document. */
export function renderChart(summaries: readonly Summary[], title: string): string {
  const parts: string[] = [];
  let y = 40;
  const plotWidth = WIDTH - LABEL_WIDTH - VALUE_WIDTH - 20;
  parts.push(text(10, 22, title, 'font-size="15" font-weight="bold"'));
  RUNTIMES.forEach((runtime, i) => {
    const x = WIDTH - 240 + i * 75;
    parts.push(`<rect x="${x}" y="12" width="12" height="12" fill="${COLORS[runtime]}"/>`);
    parts.push(text(x + 16, 22, runtime, 'font-size="12"'));
  });

  for (const panel of panels(summaries, ["throughput", "durable"]).values()) {
    const measured = [...panel.rows.values()].flat().filter((s) => s.skipped === undefined);
    // The limit can dwarf the stores (memcpy): scale to the best store,
    // and clip the limit's bar with its value printed.
    const stores = measured.filter((s) => s.spec.peer !== undefined && s.limitId !== undefined);
    const scale = Math.max(1, ...stores.map((s) => s.medianPerS));
    parts.push(text(10, y + 12, panel.title, 'font-size="13" font-weight="bold"'));
    y += 20;
    for (const [name, row] of panel.rows) {
      const rowTop = y;
      parts.push(text(10, rowTop + 1.5 * BAR_HEIGHT + 4, name, 'font-size="12"'));
      for (const runtime of RUNTIMES) {
        const s = row.find((r) => r.runtime === runtime);
        if (s !== undefined) {
          if (s.skipped === undefined) {
            const clipped = s.medianPerS > scale * 1.05;
            const width = Math.min(1, s.medianPerS / scale) * plotWidth;
            parts.push(
              `<rect x="${LABEL_WIDTH}" y="${y}" width="${
                width.toFixed(1)
              }" height="${BAR_HEIGHT}" fill="${COLORS[runtime]}"${
                clipped ? ' opacity="0.35"' : ""
              }/>`,
            );
            // An off-scale bar carries its value inside, at its start.
            const labelX = clipped ? LABEL_WIDTH + 4 : LABEL_WIDTH + width + 4;
            const label = clipped
              ? `${formatRate(s.medianPerS)} (off scale)`
              : formatRate(s.medianPerS);
            parts.push(text(labelX, y + BAR_HEIGHT - 1, label, 'font-size="9"'));
          } else {
            parts.push(
              text(
                LABEL_WIDTH,
                y + BAR_HEIGHT - 1,
                `${runtime}: ${s.skipped.startsWith("pending") ? "pending" : "n/a"}`,
                'font-size="9" fill="#888"',
              ),
            );
          }
        }
        y += BAR_HEIGHT + 1;
      }
      y += ROW_GAP;
    }
    y += PANEL_GAP - ROW_GAP;
  }

  // Latency: log scale from 10 µs to 1 s.
  const lowUs = 10;
  const highUs = 1_000_000;
  const xOf = (us: number) =>
    LABEL_WIDTH +
    (Math.log10(Math.min(highUs, Math.max(lowUs, us)) / lowUs) / Math.log10(highUs / lowUs)) *
      plotWidth;
  parts.push(
    text(
      10,
      y + 12,
      "Durable ack latency: p50 bar, p99 whisker (log scale)",
      'font-size="14" font-weight="bold"',
    ),
  );
  y += 22;
  for (const tick of [10, 100, 1_000, 10_000, 100_000, 1_000_000]) {
    parts.push(text(xOf(tick) - 12, y + 8, formatLatency(tick), 'font-size="9" fill="#555"'));
  }
  y += 14;
  const gridTop = y;
  const gridAt = parts.length;
  const durable = summaries.filter((s) =>
    s.spec.kind === "durable" || s.spec.kind === "group" || s.spec.kind === "fsync"
  );
  const latencyPanels = new Map<string, Summary[]>();
  for (const s of durable) {
    if (s.p50Us === undefined) continue;
    // The write + fdatasync limit goes in the panel of the one-producer
    // stores it took turns with, as its row "limit".
    const key = describe(s.spec.kind === "fsync" ? { ...s.spec, kind: "durable" } : s.spec)
      .replace(/ acks\/s$/, "");
    const list = latencyPanels.get(key) ?? [];
    list.push(s);
    latencyPanels.set(key, list);
  }
  for (const [key, list] of latencyPanels) {
    parts.push(text(10, y + 11, key, 'font-size="12" font-weight="bold"'));
    y += 16;
    const names = [...new Set(list.map((s) => s.spec.peer ?? "(machine)"))];
    for (const name of names) {
      parts.push(
        text(10, y + 1.5 * BAR_HEIGHT + 4, name === "(machine)" ? "limit" : name, 'font-size="12"'),
      );
      for (const runtime of RUNTIMES) {
        const s = list.find((r) => (r.spec.peer ?? "(machine)") === name && r.runtime === runtime);
        if (s?.p50Us !== undefined) {
          const x50 = xOf(s.p50Us);
          parts.push(
            `<rect x="${LABEL_WIDTH}" y="${y}" width="${
              (x50 - LABEL_WIDTH).toFixed(1)
            }" height="${BAR_HEIGHT}" fill="${COLORS[runtime]}"/>`,
          );
          if (s.p99Us !== undefined) {
            const x99 = xOf(s.p99Us);
            const mid = y + BAR_HEIGHT / 2;
            parts.push(
              `<line x1="${x50.toFixed(1)}" y1="${mid}" x2="${
                x99.toFixed(1)
              }" y2="${mid}" stroke="${COLORS[runtime]}" stroke-width="1.5"/><line x1="${
                x99.toFixed(1)
              }" y1="${y}" x2="${x99.toFixed(1)}" y2="${y + BAR_HEIGHT}" stroke="${
                COLORS[runtime]
              }" stroke-width="1.5"/>`,
            );
            parts.push(
              text(
                x99 + 4,
                y + BAR_HEIGHT - 1,
                `${formatLatency(s.p50Us)} / ${formatLatency(s.p99Us)}`,
                'font-size="9"',
              ),
            );
          }
        }
        y += BAR_HEIGHT + 1;
      }
      y += ROW_GAP;
    }
    y += 10;
  }
  for (const tick of [10, 100, 1_000, 10_000, 100_000, 1_000_000]) {
    parts.splice(
      gridAt,
      0,
      `<line x1="${xOf(tick).toFixed(1)}" y1="${gridTop}" x2="${
        xOf(tick).toFixed(1)
      }" y2="${y}" stroke="#ddd" stroke-width="0.5"/>`,
    );
  }
  const height = y + 10;
  return [
    `<svg xmlns="http://www.w3.org/2000/svg" width="${WIDTH}" height="${height}" viewBox="0 0 ${WIDTH} ${height}" font-family="sans-serif">`,
    `<rect width="${WIDTH}" height="${height}" fill="white"/>`,
    ...parts,
    "</svg>",
    "",
  ].join("\n");
}
