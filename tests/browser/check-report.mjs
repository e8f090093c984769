// Opens each `pms bench suite` report.html in headless Chromium (Debian's package, driven by
// playwright-core) and checks that it renders: no script errors, no network fetch, every table
// laid out with rows, every chart an SVG of real size with drawn marks and text — including
// those inside collapsed <details>, which are opened first. Writes report.png next to each
// report for a person to look at. Exit 1 on the first report that fails.
//
//   node tests/browser/check-report.mjs DIR/report.html [...]
import { chromium } from "playwright-core";
import { resolve } from "node:path";
import { existsSync } from "node:fs";

const executablePath = process.env.CHROMIUM ?? "/usr/bin/chromium";
if (!existsSync(executablePath)) {
  console.error(`check-report: no Chromium at ${executablePath} (Debian: apt-get install chromium; or set CHROMIUM)`);
  process.exit(2);
}
const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node check-report.mjs REPORT.html [...]");
  process.exit(64);
}

const browser = await chromium.launch({
  executablePath,
  args: ["--no-sandbox", "--disable-gpu"],
});
let failed = 0;
try {
  for (const file of files) {
    const problems = await check(file);
    if (problems.length > 0) {
      failed++;
      console.error(`FAIL ${file}`);
      for (const p of problems) console.error(`  - ${p}`);
    }
  }
} finally {
  await browser.close();
}
process.exit(failed > 0 ? 1 : 0);

async function check(file) {
  const path = resolve(file);
  const problems = [];
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  page.on("pageerror", (e) => problems.push(`script error: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console error: ${m.text()}`);
  });
  await page.route("**/*", (route) => {
    const url = route.request().url();
    if (url.startsWith("file:")) return route.continue();
    problems.push(`fetched ${url}: a report must be self-contained`);
    return route.abort();
  });
  await page.goto(`file://${path}`, { waitUntil: "load" });

  const title = await page.locator("h1").first().textContent();
  if (!title || title.trim() === "") problems.push("no <h1> title");

  // Tables: laid out, with a header and at least one body row each.
  const tables = await page.$$eval("table", (ts) =>
    ts.map((t) => ({
      width: t.getBoundingClientRect().width,
      heads: t.querySelectorAll("thead th").length,
      rows: t.querySelectorAll("tbody tr").length,
      cells: [...t.querySelectorAll("tbody td")].filter((td) => td.textContent.trim() !== "").length,
    })),
  );
  if (tables.length === 0) problems.push("no tables");
  tables.forEach((t, i) => {
    if (t.width <= 0) problems.push(`table ${i} has no width`);
    if (t.heads === 0 || t.rows === 0 || t.cells === 0) problems.push(`table ${i} is empty (${JSON.stringify(t)})`);
  });

  // Charts: open every <details> so the per-cell charts are laid out too.
  await page.$$eval("details", (ds) => ds.forEach((d) => (d.open = true)));
  const charts = await page.$$eval("figure.chart", (fs) =>
    fs.map((f) => {
      const svg = f.querySelector("svg");
      const box = svg ? svg.getBoundingClientRect() : { width: 0, height: 0 };
      const marks = svg
        ? [...svg.querySelectorAll("rect, polyline, path, line")].filter((e) => {
            const b = e.getBBox();
            return b.width > 0 || b.height > 0;
          }).length
        : 0;
      const texts = svg ? [...svg.querySelectorAll("text")].filter((t) => t.textContent.trim() !== "").length : 0;
      return { name: f.dataset.chart, width: box.width, height: box.height, marks, texts };
    }),
  );
  if (charts.length === 0) problems.push("no charts");
  for (const c of charts) {
    if (c.width < 200 || c.height < 150) problems.push(`chart "${c.name}" is ${c.width}x${c.height}`);
    if (c.marks < 3) problems.push(`chart "${c.name}" draws nothing (${c.marks} marks)`);
    if (c.texts < 2) problems.push(`chart "${c.name}" has no labels`);
  }
  const kinds = new Set(charts.map((c) => c.name.split(":")[0]));
  for (const k of ["throughput", "latency over time", "percentiles"]) {
    if (!kinds.has(k)) problems.push(`no "${k}" chart`);
  }
  await page.screenshot({ path: path.replace(/\.html$/, ".png"), fullPage: false });
  await page.close();
  if (problems.length === 0) {
    console.log(`ok   ${file}: ${tables.length} tables, ${charts.length} charts (${[...kinds].join(", ")})`);
  }
  return problems;
}
