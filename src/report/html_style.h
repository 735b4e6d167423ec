#pragma once
// The inline stylesheet and script of report.html (the page loads nothing from anywhere).
namespace tdiff::report {

inline constexpr const char* kHtmlStyle = R"CSS(
:root { --pass:#1a7f37; --warn:#9a6700; --fail:#cf222e; --ink:#1f2328; --mute:#59636e; --line:#d1d9e0;
        --band:#f3f5f8; --bg-pass:#dafbe1; --bg-warn:#fff8c5; --bg-fail:#ffebe9; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: var(--ink);
       background: #fff; }
main { max-width: 1180px; margin: 0 auto; padding: 20px 24px 40px; }
h1 { font-size: 21px; margin: 0 0 4px; }
h2 { font-size: 16px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
h3 { font-size: 14px; margin: 16px 0 6px; }
code, pre, .mono, td.num { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 12.5px; }
.sub { color: var(--mute); margin: 0; }
.verdict-line { margin: 0 0 .2em; font-weight: 600; }
.badge { display: inline-block; min-width: 48px; text-align: center; padding: 1px 8px; border-radius: 10px;
         font-weight: 700; font-size: 12px; letter-spacing: .03em; }
.badge.big { font-size: 18px; padding: 4px 16px; border-radius: 14px; }
.PASS { color: var(--pass); background: var(--bg-pass); }
.WARN { color: var(--warn); background: var(--bg-warn); }
.FAIL { color: var(--fail); background: var(--bg-fail); }
.MISSING { color: var(--mute); background: var(--band); }
.head { display: flex; gap: 18px; align-items: center; flex-wrap: wrap; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(250px, 1fr)); gap: 12px; margin-top: 16px; }
.card { border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px; }
.card .k { color: var(--mute); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .v { font-size: 15px; margin-top: 2px; overflow-wrap: anywhere; }
.card ol { margin: 4px 0 0; padding-left: 20px; }
svg.plot { width: 100%; height: auto; display: block; margin: 6px 0 14px; }
svg .ptitle { font-size: 13px; font-weight: 600; fill: var(--ink); }
svg .band { fill: var(--band); }
svg .blabel { font-size: 10px; fill: var(--mute); text-anchor: middle; }
svg .frame { fill: none; stroke: var(--line); }
svg .grid { stroke: #eef1f4; }
svg .tick { font-size: 10.5px; fill: var(--mute); text-anchor: end; }
svg .thr { stroke-width: 1.3; stroke-dasharray: 6 4; }
svg .thr.warn { stroke: var(--warn); } svg .thr.fail { stroke: var(--fail); }
svg .tlabel { font-size: 10.5px; text-anchor: end; } svg .tlabel.warn { fill: var(--warn); } svg .tlabel.fail { fill: var(--fail); }
svg .marker { stroke: var(--fail); stroke-width: 1.2; stroke-dasharray: 2 3; }
svg .mlabel { font-size: 10.5px; fill: var(--fail); font-weight: 600; }
table.heat { width: auto; max-width: 100%; table-layout: fixed; }
table.heat td.h { width: 34px; min-width: 22px; text-align: center; font-size: 10.5px; padding: 2px 1px;
                  border: 1px solid #fff; white-space: nowrap; overflow: hidden; }
table.heat td.h a { color: #1f2328; text-decoration: none; display: block; }
table.heat td.none { background: #f6f8fa; }
td.where { font-size: 12px; overflow-wrap: anywhere; min-width: 140px; }
svg .series { fill: none; stroke: #8c959f; stroke-width: 1; }
svg .pt.pass { fill: var(--pass); } svg .pt.warn { fill: #d4a72c; } svg .pt.fail { fill: var(--fail); }
table { border-collapse: collapse; width: 100%; }
th, td { padding: 3px 7px; border-bottom: 1px solid #eef1f4; text-align: left; vertical-align: top; }
th { position: sticky; top: 0; background: #f6f8fa; border-bottom: 1px solid var(--line); font-size: 12.5px;
     white-space: nowrap; }
table.sortable th { cursor: pointer; user-select: none; }
table.sortable th:hover { background: #eaeef2; }
th.asc::after { content: " \25B2"; font-size: 9px; } th.desc::after { content: " \25BC"; font-size: 9px; }
td.num { text-align: right; white-space: nowrap; }
td.reason { color: var(--mute); font-size: 12.5px; overflow-wrap: anywhere; }
tr.grp td { background: var(--band); font-weight: 600; font-size: 12px; color: var(--mute); }
tr.first td { box-shadow: inset 0 1px var(--fail), inset 0 -1px var(--fail); }
tr:target td { background: #fff8c5; }
.tools { display: flex; gap: 14px; align-items: center; margin: 4px 0 8px; color: var(--mute); font-size: 13px; }
.hide-pass tr.vPASS, .hide-pass tr.grp { display: none; }
pre { background: #f6f8fa; border: 1px solid var(--line); border-radius: 6px; padding: 8px 10px; white-space: pre-wrap;
      overflow-wrap: anywhere; margin: 4px 0; }
.tokens { display: grid; grid-template-columns: repeat(auto-fit, minmax(360px, 1fr)); gap: 12px; }
.tok { border: 1px solid var(--line); border-radius: 8px; padding: 6px 10px; break-inside: avoid; }
.tok table td, .tok table th { padding: 1px 6px; }
.tok .miss { color: var(--fail); font-weight: 700; }
.legend { color: var(--mute); font-size: 12.5px; }
.env td:first-child { color: var(--mute); white-space: nowrap; width: 1%; }
.env td code { overflow-wrap: anywhere; }
table.stats th { white-space: normal; font-size: 12px; } table.stats td { padding: 3px 5px; }
@media print {
  body { font-size: 10.5px; }
  main { max-width: none; padding: 0; }
  .tools, .noprint { display: none; }
  h2 { break-after: avoid; }
  svg.plot, .card, tr, .tok { break-inside: avoid; }
  th { position: static; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
}
)CSS";

// Sorting by a column (numbers sort by their data-v value) and hiding PASS rows. Group
// header rows only make sense in model order, so sorting hides them.
inline constexpr const char* kHtmlScript = R"JS(
(function () {
  var table = document.getElementById('stages');
  if (!table) return;
  var body = table.tBodies[0];
  var rows = Array.prototype.slice.call(body.rows);
  var heads = table.tHead.rows[0].cells;
  Array.prototype.forEach.call(heads, function (th, col) {
    th.addEventListener('click', function () {
      var dir = th.classList.contains('asc') ? -1 : 1;
      Array.prototype.forEach.call(heads, function (h) { h.classList.remove('asc', 'desc'); });
      th.classList.add(dir > 0 ? 'asc' : 'desc');
      var data = rows.filter(function (r) { return !r.classList.contains('grp'); });
      data.sort(function (a, b) {
        var x = a.cells[col].getAttribute('data-v'), y = b.cells[col].getAttribute('data-v');
        if (x === null) { x = a.cells[col].textContent; y = b.cells[col].textContent; return dir * x.localeCompare(y); }
        return dir * (parseFloat(x) - parseFloat(y)) || (parseInt(a.id.slice(4)) - parseInt(b.id.slice(4)));
      });
      rows.forEach(function (r) { if (r.classList.contains('grp')) r.style.display = 'none'; });
      data.forEach(function (r) { body.appendChild(r); });
    });
  });
  var only = document.getElementById('only-bad');
  only.addEventListener('change', function () { table.classList.toggle('hide-pass', only.checked); });
})();
)JS";

}  // namespace tdiff::report
