// Stop polling after an error (the trigger filter reads data-poll-failed) and say so.
document.addEventListener("htmx:responseError", stopPolling);
document.addEventListener("htmx:sendError", stopPolling);

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
