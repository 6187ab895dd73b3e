// agentd status page: re-fetch the page's main part every data-refresh-ms and swap it in,
// keeping open timelines open. Timelines load only when opened.
"use strict";
(function () {
  const main = document.getElementById("status");
  const every = parseInt(document.body.dataset.refreshMs, 10) || 2000;

  function loadOpenTimelines() {
    for (const d of main.querySelectorAll("details.timeline[open]")) {
      const img = d.querySelector("img");
      if (img && img.dataset.src && img.getAttribute("src") !== img.dataset.src) {
        img.setAttribute("src", img.dataset.src);
      }
    }
  }

  main.addEventListener("toggle", loadOpenTimelines, true);

  async function refresh() {
    const open = new Set(Array.from(main.querySelectorAll("details.timeline[open]"), (d) => d.id));
    try {
      const resp = await fetch("/?part=main", { cache: "no-store", credentials: "same-origin" });
      const html = await resp.text();
      main.innerHTML = html;
      for (const id of open) {
        const d = document.getElementById(id);
        if (d) d.open = true;
      }
      loadOpenTimelines();
      document.body.dataset.refreshed = String((parseInt(document.body.dataset.refreshed, 10) || 0) + 1);
    } catch (err) {
      const s = document.getElementById("refresh-state");
      if (s) { s.textContent = "(agent not reachable; retrying)"; s.className = "stale"; }
    }
    setTimeout(refresh, every);
  }
  setTimeout(refresh, every);
})();
