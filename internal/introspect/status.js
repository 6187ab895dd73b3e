// agentd status page: re-fetch the page's main part every data-refresh-ms and swap it in. An
// open timeline stays open and keeps its drawing on screen; a newer drawing (its URL carries
// the journal's sequence number) is loaded beside it and shown once it has arrived, so the
// page never flickers. Timelines load only when opened.
"use strict";
(function () {
  const main = document.getElementById("status");
  const every = parseInt(document.body.dataset.refreshMs, 10) || 2000;

  function show(img) {
    const want = img.dataset.src;
    if (!want || img.getAttribute("src") === want) return;
    if (!img.getAttribute("src")) { img.setAttribute("src", want); return; }
    const next = new Image();
    next.onload = () => { if (img.dataset.src === want) img.setAttribute("src", want); };
    next.src = want;
  }

  main.addEventListener("toggle", (ev) => {
    const d = ev.target;
    if (d.matches && d.matches("details.timeline") && d.open) {
      const img = d.querySelector("img");
      if (img) show(img);
    }
  }, true);

  async function refresh() {
    const open = new Map();
    for (const d of main.querySelectorAll("details.timeline[open]")) open.set(d.id, d.querySelector("img"));
    try {
      const resp = await fetch("/?part=main", { cache: "no-store", credentials: "same-origin" });
      const html = await resp.text();
      main.innerHTML = html;
      for (const [id, old] of open) {
        const d = document.getElementById(id);
        if (!d) continue;
        d.open = true;
        const fresh = d.querySelector("img");
        if (old && fresh) {
          old.dataset.src = fresh.dataset.src;
          fresh.replaceWith(old); // keep what is drawn until the newer drawing is there
          show(old);
        } else if (fresh) {
          show(fresh);
        }
      }
      document.body.dataset.refreshed = String((parseInt(document.body.dataset.refreshed, 10) || 0) + 1);
    } catch (err) {
      const s = document.getElementById("refresh-state");
      if (s) { s.textContent = "(agent not reachable; retrying)"; s.className = "stale"; }
    }
    setTimeout(refresh, every);
  }
  setTimeout(refresh, every);
})();
