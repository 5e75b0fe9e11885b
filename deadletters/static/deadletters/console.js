// Stop polling after an error (each [data-poll] element's timer request is cancelled once its
// data-poll-failed is set) and say so. A listener, not an hx-trigger filter: filters need eval,
// which the Content-Security-Policy forbids.
document.addEventListener("htmx:responseError", stopPolling);
document.addEventListener("htmx:sendError", stopPolling);
document.addEventListener("htmx:beforeRequest", (event) => {
  const elt = event.detail.elt;
  if (elt.matches("[data-poll]") && elt.dataset.pollFailed === "true") event.preventDefault();
});

function stopPolling(event) {
  const poller = event.detail.elt.closest("[data-poll]");
  if (!poller) return;
  poller.dataset.pollFailed = "true";
  document.querySelectorAll(".poll-error").forEach((note) => (note.hidden = false));
}

// "Select this page" ticks every row checkbox of the table it heads.
document.addEventListener("change", (event) => {
  if (!event.target.matches(".select-page")) return;
  const table = event.target.closest("table");
  table.querySelectorAll('input[name="ids"]').forEach((box) => (box.checked = event.target.checked));
});

// Each cell of a table gets its column's header as data-label, which the narrow-screen layout
// shows beside the value (console.css): the labels live once, in the header. Headers spanning
// columns (Run time → p50, p95, p99) are joined. A cell spanning columns (an empty state) gets
// none.
function labelTables(root) {
  const tables = root.matches && root.matches("table.grid") ? [root] : root.querySelectorAll("table.grid");
  tables.forEach((table) => {
    if (!table.tHead) return;
    const columns = [];
    const taken = [];
    Array.from(table.tHead.rows).forEach((row, r) => {
      let c = 0;
      Array.from(row.cells).forEach((cell) => {
        while (taken[r] && taken[r][c]) c++;
        const text = cell.textContent.trim();
        for (let i = 0; i < cell.colSpan; i++) {
          for (let j = 0; j < cell.rowSpan; j++) {
            (taken[r + j] = taken[r + j] || [])[c + i] = true;
          }
          columns[c + i] = columns[c + i] || [];
          if (text && !columns[c + i].includes(text)) columns[c + i].push(text);
        }
        c += cell.colSpan;
      });
    });
    Array.from(table.tBodies).forEach((body) => {
      Array.from(body.rows).forEach((row) => {
        let c = 0;
        Array.from(row.cells).forEach((cell) => {
          if (cell.colSpan === 1 && !cell.hasAttribute("data-label")) {
            cell.dataset.label = (columns[c] || []).join(" ");
          }
          c += cell.colSpan;
        });
      });
    });
  });
}
document.addEventListener("DOMContentLoaded", () => labelTables(document));
document.addEventListener("htmx:load", (event) => labelTables(event.target));
