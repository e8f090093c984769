// Live pages: while a page with `data-live` regions is open, ask /app/live whether the parks
// changed (a long poll) and, when they did, fetch the page again and swap those regions in.
// Without this script the page is simply as it was when loaded.
"use strict";
(() => {
  const regions = () => document.querySelectorAll("[data-live][id]");
  if (regions().length === 0) return;
  const pause = (ms) => new Promise((done) => setTimeout(done, ms));

  async function refresh() {
    const r = await fetch(location.href, { credentials: "same-origin" });
    if (!r.ok) return;
    const fresh = new DOMParser().parseFromString(await r.text(), "text/html");
    for (const old of regions()) {
      const now = fresh.getElementById(old.id);
      if (now) old.replaceWith(document.importNode(now, true));
    }
  }

  async function follow() {
    let after = null;
    for (;;) {
      try {
        const r = await fetch(after === null ? "/app/live" : `/app/live?after=${after}`, {
          credentials: "same-origin",
          headers: { accept: "application/json" },
        });
        if (r.status === 401) return; // signed out: nothing to follow
        if (!r.ok) { await pause(5000); continue; }
        const { version } = await r.json();
        // The first answer may already be newer than the page: refresh once then too. At most
        // one refresh a second, however busy the parks are.
        if (version !== after) {
          await refresh();
          await pause(1000);
        }
        after = version;
      } catch {
        await pause(5000);
      }
    }
  }
  follow();
})();
