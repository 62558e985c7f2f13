// batchq console: refresh the page's live part every data-refresh ms by
// fetching the page again with the X-Batchq-Live header, which answers with
// that part only. No reload: forms, scroll and focus stay as they are.
(function () {
  "use strict";
  var live = document.getElementById("live");
  if (!live) { return; }
  var every = parseInt(live.dataset.refresh, 10) || 2000;
  var src = live.dataset.src || window.location.pathname + window.location.search;
  var busy = false;
  function refresh() {
    if (busy || document.hidden) { return; }
    busy = true;
    fetch(src, { headers: { "X-Batchq-Live": "1" }, credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (!r.ok) { throw new Error("HTTP " + r.status); }
        return r.text();
      })
      .then(function (html) {
        live.innerHTML = html;
        live.classList.remove("stale");
        live.dataset.refreshed = String(Date.now());
      })
      .catch(function () { live.classList.add("stale"); })
      .then(function () { busy = false; });
  }
  window.setInterval(refresh, every);
})();
