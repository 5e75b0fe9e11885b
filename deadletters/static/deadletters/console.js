// Live refresh. Each part of a page that polls is a [data-poll="N"] element (N: the page's own
// pace in seconds) refreshed by the event redrive:refresh, which one timer sends: at the pace
// the operator chose in the page's live-refresh control (off, 1–15 s, kept in localStorage for
// every page) or else at N. The next refresh is timed from the end of the last one, so a slow
// answer never piles requests up. After an error polling stops (the element's
// data-poll-failed), and the page says so. A listener, not an hx-trigger filter: filters need
// eval, which the Content-Security-Policy forbids.
const REFRESH_KEY = "redrive.refresh";
const REFRESH_CHOICES = ["auto", "off", "1", "2", "5", "15"];
let refreshTimer = null;

function refreshChoice() {
  try {
    const stored = localStorage.getItem(REFRESH_KEY);
    return REFRESH_CHOICES.includes(stored) ? stored : "auto";
  } catch {
    return "auto"; // storage refused (a private window's policy): the page's own pace
  }
}

function livePollers() {
  return Array.from(document.querySelectorAll("[data-poll]")).filter((el) => el.dataset.pollFailed !== "true");
}

function scheduleRefresh() {
  clearTimeout(refreshTimer);
  const pollers = livePollers();
  const choice = refreshChoice();
  if (!pollers.length || choice === "off") return;
  const seconds = choice === "auto" ? Math.min(...pollers.map((el) => Number(el.dataset.poll) || Infinity)) : Number(choice);
  if (!Number.isFinite(seconds) || seconds <= 0) return;
  refreshTimer = setTimeout(() => livePollers().forEach((el) => htmx.trigger(el, "redrive:refresh")), seconds * 1000);
}

document.addEventListener("DOMContentLoaded", () => {
  document.querySelectorAll(".live-refresh-choice").forEach((select) => (select.value = refreshChoice()));
  scheduleRefresh();
});
document.addEventListener("change", (event) => {
  if (!event.target.matches(".live-refresh-choice")) return;
  try {
    localStorage.setItem(REFRESH_KEY, event.target.value);
  } catch {
    // Not kept: it still applies to this page.
  }
  document.querySelectorAll(".live-refresh-choice").forEach((select) => (select.value = event.target.value));
  if (event.target.value !== "off") livePollers().forEach((el) => htmx.trigger(el, "redrive:refresh"));
  scheduleRefresh();
});
// A refresh (or a control's answer) swapped a part in: time the next one from now.
document.addEventListener("htmx:afterSettle", scheduleRefresh);

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
  clearTimeout(refreshTimer);
  document.querySelectorAll(".poll-error").forEach((note) => (note.hidden = false));
}

// Keyboard focus survives a refresh. A poll swaps its part for a new one every few seconds;
// htmx refocuses only an element with an id, so a link or button focused inside the part was
// lost, and Tab started again from the top of the page: a control further down was never
// reached. The focused control is found again in the part swapped in (the same kind, target,
// name and text, the nearest to where it was) and focused, so Tab goes on from there.
const FOCUSABLE = 'a[href], button, input:not([type="hidden"]), select, textarea, summary, [tabindex]';
let keptFocus = null;

function focusKey(el) {
  return [el.tagName, el.getAttribute("href"), el.getAttribute("name"), el.getAttribute("value"),
    el.getAttribute("aria-label"), el.textContent.trim().slice(0, 80)].join("|");
}

document.addEventListener("htmx:beforeSwap", (event) => {
  keptFocus = null;
  const part = event.detail.target;
  const active = document.activeElement;
  if (!part || !part.id || !active || active === document.body || !part.contains(active)) return;
  const all = Array.from(part.querySelectorAll(FOCUSABLE));
  keptFocus = { part: part.id, index: all.indexOf(active), key: focusKey(active) };
});
document.addEventListener("htmx:afterSettle", () => {
  const kept = keptFocus;
  keptFocus = null;
  // Kept by htmx (an id), or moved by the operator meanwhile: left where it is.
  if (!kept || (document.activeElement && document.activeElement !== document.body)) return;
  const part = document.getElementById(kept.part);
  if (!part) return;
  const all = Array.from(part.querySelectorAll(FOCUSABLE));
  const same = all.filter((el) => focusKey(el) === kept.key);
  const distance = (el) => Math.abs(all.indexOf(el) - kept.index);
  const found = same.length
    ? same.reduce((best, el) => (distance(el) < distance(best) ? el : best))
    : all[Math.min(Math.max(kept.index, 0), all.length - 1)];
  if (found) found.focus({ preventScroll: true });
});

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

// Keyboard shortcuts, listed in the dialog "?" opens (base.html). An element with data-key="K"
// is clicked by the key K (a page's Replay…, Discard…, Edit, Up); "g" then a letter follows
// the top bar's link with that data-go; j/k move between the rows of a table[data-rows], x
// ticks the row's box, o opens it. Nothing fires while typing in a field, nor with a modifier
// held (the browser's own shortcuts), nor under an open dialog.
let awaitingGo = null;

function typingIn(target) {
  return target instanceof Element && target.closest("input, textarea, select, [contenteditable]");
}

function listRows() {
  return Array.from(document.querySelectorAll("table[data-rows] tbody tr")).filter((row) =>
    row.querySelector("a[href]"),
  );
}

function currentRow(rows) {
  return rows.find((row) => row.contains(document.activeElement)) || rows.find((row) => row.classList.contains("current"));
}

function moveRow(step) {
  const rows = listRows();
  if (!rows.length) return false;
  const at = rows.indexOf(currentRow(rows));
  const next = rows[at < 0 ? 0 : Math.min(rows.length - 1, Math.max(0, at + step))];
  rows.forEach((row) => row.classList.toggle("current", row === next));
  next.querySelector("a[href]").focus();
  return true;
}

function openShortcuts(opener) {
  const dialog = document.getElementById("shortcuts");
  if (!dialog || dialog.open) return;
  dialog.showModal();
  dialog.addEventListener("close", () => opener && opener.focus && opener.focus(), { once: true });
}

document.addEventListener("click", (event) => {
  const opener = event.target.closest('[aria-controls="shortcuts"]');
  if (opener) openShortcuts(opener);
});

document.addEventListener("keydown", (event) => {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
  if (typingIn(event.target)) {
    if (event.key === "Escape") event.target.blur();
    return;
  }
  if (document.querySelector("dialog[open]")) return;
  const key = event.key;
  if (awaitingGo) {
    clearTimeout(awaitingGo);
    awaitingGo = null;
    const link = document.querySelector(`.topbar [data-go="${CSS.escape(key)}"]`);
    if (link) {
      event.preventDefault();
      link.click();
    }
    return;
  }
  if (key === "g") {
    awaitingGo = setTimeout(() => (awaitingGo = null), 1500);
    return;
  }
  if (key === "?") {
    event.preventDefault();
    openShortcuts(document.activeElement);
    return;
  }
  if (key === "/") {
    const filters = document.querySelector("form.filters");
    const search = filters && (filters.querySelector('input[name="q"]') || filters.querySelector('input:not([type="hidden"]):not([type="checkbox"])'));
    if (search) {
      event.preventDefault();
      search.focus();
    }
    return;
  }
  if (key === "j" || key === "k") {
    if (moveRow(key === "j" ? 1 : -1)) event.preventDefault();
    return;
  }
  if (key === "x" || key === "o") {
    const row = currentRow(listRows());
    const target = row && (key === "x" ? row.querySelector('input[name="ids"]') : row.querySelector("a[href]"));
    if (target) {
      event.preventDefault();
      target.click();
    }
    return;
  }
  const target = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
  if (target && target.getClientRects().length) {
    event.preventDefault();
    target.click();
  }
});
