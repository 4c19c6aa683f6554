// tailcut ui: select a span without reloading the page, and load large payloads when asked.
"use strict";

function selectSpan(body, link) {
  const spanId = link.dataset.span;
  const trace = body.dataset.trace;
  const detail = document.getElementById("detail");
  fetch(`/traces/${trace}/spans/${spanId}`, { credentials: "same-origin" })
    .then((r) => (r.ok ? r.text() : Promise.reject(new Error(`${r.status}`))))
    .then((html) => {
      detail.innerHTML = html;
      body.querySelectorAll(".wf-row.selected").forEach((row) => row.classList.remove("selected"));
      const row = body.querySelector(`.wf-row[data-span="${spanId}"]`);
      if (row) row.classList.add("selected");
      history.replaceState(null, "", `?span=${spanId}`);
    })
    .catch((err) => { detail.textContent = `could not load the span (${err.message})`; });
}

function loadPayload(button) {
  button.disabled = true;
  button.textContent = "loading…";
  fetch(button.dataset.url, { credentials: "same-origin" })
    .then((r) => (r.ok ? r.json() : Promise.reject(new Error(`${r.status}`))))
    .then((data) => {
      button.nextElementSibling.innerHTML = data.html;
      button.remove();
    })
    .catch((err) => { button.textContent = `could not load (${err.message})`; });
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("button.load-payload");
  if (button) { loadPayload(button); return; }
  const link = event.target.closest("a[data-span]");
  const body = document.querySelector(".trace-body");
  if (link && body && !event.metaKey && !event.ctrlKey) {
    event.preventDefault();
    selectSpan(body, link);
  }
});
