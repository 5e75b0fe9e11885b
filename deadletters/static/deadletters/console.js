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
