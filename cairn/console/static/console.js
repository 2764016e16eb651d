// cairn console: the run page follows its run live. No framework, no build step, no
// inline script (the pages' CSP forbids it): this file is the only script.
//
// The run's stream (the API's own, signed in by the session cookie) says when something
// happened; the page then fetches its live parts again, rendered by the server, and
// swaps them in (#live always, #actions when what waits changed). Streamed model text
// (`chunk` events) is appended as it arrives.
"use strict";

(function () {
  const root = document.getElementById("run");
  if (!root || !window.EventSource) {
    return;
  }
  let timer = null;
  let busy = false;
  let again = false;

  async function refresh() {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      const answer = await fetch(root.dataset.live, { credentials: "same-origin" });
      if (answer.ok) {
        const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
        swap(fresh, "live", true);
        swap(fresh, "actions", false);
      }
    } finally {
      busy = false;
      if (again) {
        again = false;
        soon();
      }
    }
  }

  function swap(fresh, id, always) {
    const next = fresh.getElementById(id);
    const now = document.getElementById(id);
    if (!next || !now) {
      return;
    }
    if (always || next.dataset.sig !== now.dataset.sig) {
      now.replaceWith(document.importNode(next, true));
    }
  }

  function soon() {
    clearTimeout(timer);
    timer = setTimeout(refresh, 120);
  }

  function chunk(message) {
    const data = JSON.parse(message.data);
    const section = document.getElementById("model-text");
    const holder = document.getElementById("chunks");
    if (!section || !holder || typeof data.text !== "string") {
      return;
    }
    section.hidden = false;
    const id = "chunks-" + data.node + "-" + (data.iteration || 1) + "-" + (data.call || 0);
    let block = document.getElementById(id);
    if (!block) {
      block = document.createElement("pre");
      block.id = id;
      block.className = "chunks";
      block.dataset.node = data.node;
      holder.appendChild(block);
    }
    if (data.superseded) {
      block.classList.add("superseded");
    }
    block.textContent += data.text;
  }

  const stream = new EventSource(root.dataset.stream);
  for (const type of (root.dataset.types || "").split(" ")) {
    if (type) {
      stream.addEventListener(type, soon);
    }
  }
  stream.addEventListener("progress", soon); // a running node's heartbeat changed
  stream.addEventListener("chunk", chunk);
  stream.addEventListener("end", function () {
    stream.close();
    soon();
  });
  root.dataset.following = "yes";
})();
