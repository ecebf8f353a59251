// ctxkeeper console: live updates of a session page over its server-sent events. Loaded as a
// file (the Content-Security-Policy allows no inline script); it writes text only
// (textContent), never markup.
(function () {
  "use strict";
  var url = document.body && document.body.dataset.events;
  if (!url || !window.EventSource) return;
  var list = document.getElementById("live");
  var status = document.getElementById("live-status");
  var follow = document.getElementById("follow");
  var KEY = "ctxkeeper-console-follow";
  if (follow) {
    follow.checked = window.sessionStorage.getItem(KEY) === "1";
    follow.addEventListener("change", function () {
      window.sessionStorage.setItem(KEY, follow.checked ? "1" : "0");
    });
  }
  var names = [
    "budget_used", "context_compaction_start", "context_compaction_end", "compaction_skipped",
    "tool_result_truncated", "summary_checked", "content_offloaded", "overflow_recovered",
    "memory_flushed", "usage_reported", "history_diverged", "session_forked",
    "newest_message_replaced", "overflow_repeated", "upstream_error", "overflow_unrecovered",
    "events_lost"
  ];
  var reload = null;
  var source = new EventSource(url);
  source.onopen = function () { if (status) status.textContent = "live"; };
  source.onerror = function () { if (status) status.textContent = "disconnected, retrying…"; };
  names.forEach(function (name) {
    source.addEventListener(name, function (event) {
      if (list) {
        var item = document.createElement("li");
        item.textContent = new Date().toLocaleTimeString() + "  " + name + "  " + event.data;
        list.insertBefore(item, list.firstChild);
        while (list.children.length > 100) list.removeChild(list.lastChild);
      }
      // A new request was committed: its point and any compaction are on the server now.
      if (follow && follow.checked && name === "budget_used" && reload === null) {
        reload = window.setTimeout(function () { window.location.reload(); }, 1000);
      }
    });
  });
})();
