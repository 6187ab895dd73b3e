// agentd status page: re-fetch the page's main part every data-refresh-ms and swap it in. An
// open timeline stays open and keeps its drawing on screen; a newer drawing (its URL carries
// the journal's sequence number) is loaded beside it and shown once it has arrived, so the
// page never flickers. Timelines load only when opened.
//
// Every request sends Agentd-Client: root or the agent's user on this host reads tasks and
// timelines only with it (README "Security"), and a page's own navigation and <img> cannot send
// it — so the script fetches the main part at once when the page came without tasks, and
// fetches each drawing itself, showing it as a data: URL (the CSP allows img-src data:).
// data-shown holds the URL of the drawing on screen.
"use strict";
(function () {
  const main = document.getElementById("status");
  const every = parseInt(document.body.dataset.refreshMs, 10) || 2000;
  const own = { cache: "no-store", credentials: "same-origin", headers: { "Agentd-Client": "1" } };

  async function drawing(url) {
    const resp = await fetch(url, own);
    if (!resp.ok) throw new Error("timeline: HTTP " + resp.status);
    return "data:image/svg+xml;charset=utf-8," + encodeURIComponent(await resp.text());
  }

  function show(img) {
    const want = img.dataset.src;
    if (!want || img.dataset.shown === want || img.dataset.loading === want) return;
    img.dataset.loading = want;
    drawing(want).then((src) => {
      const next = new Image();
      next.onload = () => {
        if (img.dataset.src !== want) return;
        img.setAttribute("src", src);
        img.dataset.shown = want;
      };
      next.src = src;
    }, () => {}).finally(() => { if (img.dataset.loading === want) delete img.dataset.loading; });
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
      const resp = await fetch("/?part=main", own);
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
  setTimeout(refresh, document.getElementById("tasks-limited") ? 0 : every);
})();
