// Live pending page: on every store event (Server-Sent Events), re-fetch the server-rendered
// fragment and swap it in. No framework, no build step.
(function () {
  "use strict";
  var target = document.getElementById("pending");
  var status = document.getElementById("live-status");
  if (!target || !window.EventSource) { return; }
  var timer = null;

  function refresh() {
    fetch(target.dataset.live, { headers: { Accept: "text/html" } })
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (html) { if (html !== null) { target.innerHTML = html; } })
      .catch(function () { /* the next event or tick retries */ });
  }

  function soon() { clearTimeout(timer); timer = setTimeout(refresh, 100); }

  var url = "/v1/dashboard/events?namespace=" + encodeURIComponent(target.dataset.namespace);
  var events = new EventSource(url);
  events.onopen = function () { status.textContent = "live"; status.classList.add("on"); };
  events.onerror = function () { status.textContent = "reconnecting…"; status.classList.remove("on"); };
  ["handoff", "claim", "done", "failed", "queued", "expired", "remember", "outcome"].forEach(
    function (kind) { events.addEventListener(kind, soon); }
  );
  setInterval(refresh, 15000);  // ages and lease timers move on by themselves
})();
