// saga-worker console: refresh a run page's live part while an unwind is moving.
// Polls /runs/<id>/live every second while the server says something moves (X-Saga-Moving: 1),
// and for up to a minute after an action (?watch=1) until the unwind it started has settled.
(function () {
  "use strict";
  var body = document.body, url = body.dataset.liveUrl;
  if (!url) { return; }
  var moving = body.dataset.moving === "1";
  var watchUntil = body.dataset.watch === "1" ? Date.now() + 60000 : 0;
  var sawMoving = moving;
  function tick() {
    if (!moving && Date.now() > watchUntil) { return; }
    fetch(url, { credentials: "same-origin", cache: "no-store" }).then(function (r) {
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      moving = r.headers.get("X-Saga-Moving") === "1";
      sawMoving = sawMoving || moving;
      if (sawMoving && !moving) { watchUntil = 0; }  // the watched unwind has started and settled
      return r.text();
    }).then(function (html) {
      document.getElementById("live").innerHTML = html;
    }).catch(function () { /* a missed poll is retried on the next tick */ })
      .then(function () { window.setTimeout(tick, 1000); });
  }
  if (moving || watchUntil) { window.setTimeout(tick, 1000); }
}());
