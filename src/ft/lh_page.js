/* The lighthouse status page's script (lh_http.c embeds it): it fetches
 * /status every second and draws the replicas, the events, the chart of
 * the quorum's step and size (SVG) and the quorum changes; with
 * --allow-kill a button per replica posts /kill. No external assets: the
 * machines it runs on may have no internet. */
"use strict";
var $ = function (id) { return document.getElementById(id); };
function esc(s) {
  return String(s).replace(/[&<>"']/g, function (c) {
    return "&#" + c.charCodeAt(0) + ";";
  });
}
function ms(v) { return v === null ? "never" : v + " ms"; }
function chart(samples, now) {
  var W = 640, H = 200, L = 50, R = 40, T = 10, B = 30;
  var svg = '<svg xmlns="http://www.w3.org/2000/svg" width="' + W +
      '" height="' + H + '" role="img" aria-label="committed step and ' +
      'members over time">';
  if (samples.length === 0)
    return svg + '<text x="' + L + '" y="' + H / 2 +
        '">no quorum yet</text></svg>';
  var t0 = samples[0][0], t1 = Math.max(now, t0 + 1000);
  var s1 = 1, m1 = 1;
  samples.forEach(function (p) { s1 = Math.max(s1, p[1]); m1 = Math.max(m1, p[2]); });
  var x = function (t) { return L + (t - t0) / (t1 - t0) * (W - L - R); };
  var ys = function (v) { return H - B - v / s1 * (H - T - B); };
  var ym = function (v) { return H - B - v / m1 * (H - T - B); };
  var step = [], mem = [];
  samples.forEach(function (p, i) {
    step.push(x(p[0]).toFixed(1) + "," + ys(p[1]).toFixed(1));
    if (i > 0) mem.push(x(p[0]).toFixed(1) + "," + ym(samples[i - 1][2]).toFixed(1));
    mem.push(x(p[0]).toFixed(1) + "," + ym(p[2]).toFixed(1));
  });
  var last = samples[samples.length - 1];
  step.push(x(t1).toFixed(1) + "," + ys(last[1]).toFixed(1));
  mem.push(x(t1).toFixed(1) + "," + ym(last[2]).toFixed(1));
  svg += '<rect x="' + L + '" y="' + T + '" width="' + (W - L - R) +
      '" height="' + (H - T - B) + '" fill="none" stroke="#ccc"/>';
  svg += '<polyline id="steps" fill="none" stroke="#0b5394" stroke-width="2" points="' +
      step.join(" ") + '"/>';
  svg += '<polyline id="members" fill="none" stroke="#e69138" stroke-width="2" ' +
      'stroke-dasharray="4 3" points="' + mem.join(" ") + '"/>';
  svg += '<text x="' + (L - 4) + '" y="' + (T + 10) + '" text-anchor="end" fill="#0b5394">' +
      s1 + '</text><text x="' + (L - 4) + '" y="' + (H - B) +
      '" text-anchor="end" fill="#0b5394">0</text>';
  svg += '<text x="' + (W - R + 4) + '" y="' + (T + 10) + '" fill="#e69138">' + m1 +
      '</text><text x="' + (W - R + 4) + '" y="' + (H - B) + '" fill="#e69138">0</text>';
  svg += '<text x="' + L + '" y="' + (H - 8) + '">' +
      Math.round((t1 - t0) / 1000) + ' s ago</text><text x="' + (W - R) +
      '" y="' + (H - 8) + '" text-anchor="end">now</text>';
  svg += '<text x="' + (L + 8) + '" y="' + (T + 16) + '" fill="#0b5394">step</text>';
  svg += '<text x="' + (L + 8) + '" y="' + (T + 32) + '" fill="#e69138">members</text>';
  return svg + "</svg>";
}
function kill(id) {
  if (!window.confirm("Kill replica " + id + "? (a drill)")) return;
  fetch("/kill?replica=" + encodeURIComponent(id), {method: "POST"})
    .then(function (r) { return r.text(); })
    .then(function (t) { $("note").textContent = t; });
}
function render(d) {
  $("head").textContent = "quorum " + d.quorum_id + ", round " + d.round +
      ", min_replicas " + d.min_replicas + ", join timeout " +
      d.join_timeout_ms + " ms, heartbeat timeout " + d.heartbeat_timeout_ms +
      " ms, tick " + d.quorum_tick_ms + " ms";
  $("inc").textContent = d.incarnation;
  $("waiting").textContent = d.waiting;
  var rows = "<tr><th>replica</th><th>step</th><th>world size</th>" +
      "<th>heartbeat age</th><th>joined</th><th>in quorum</th>" +
      (d.allow_kill ? "<th></th>" : "") + "</tr>";
  d.replicas.forEach(function (r) {
    var cls = !r.healthy ? "dead" : r.late ? "late" : "ok";
    rows += '<tr class="' + cls + '"><td>' + esc(r.replica_id) + "</td><td>" +
        (r.step === null ? "-" : r.step) + "</td><td>" +
        (r.world_size === null ? "-" : r.world_size) + "</td><td>" +
        ms(r.heartbeat_age_ms) + (cls === "ok" ? "" : " (" + cls + ")") +
        "</td><td>" + (r.joined ? "yes" : "no") + "</td><td>" +
        (r.in_quorum ? "yes" : "no") + "</td>" +
        (d.allow_kill ? '<td><button data-id="' + esc(r.replica_id) +
         '">kill</button></td>' : "") + "</tr>";
  });
  $("replicas").innerHTML = rows;
  Array.prototype.forEach.call($("replicas").querySelectorAll("button"),
    function (b) { b.onclick = function () { kill(b.getAttribute("data-id")); }; });
  $("chart").innerHTML = chart(d.samples, d.now_ms);
  var ev = "";
  d.events.forEach(function (e) {
    ev += '<li class="ev-' + esc(e.kind) + '"><span class="t">' +
        esc(e.time.slice(11, 23)) + "</span> <b>" + esc(e.kind) + "</b> " +
        esc(e.text) + "</li>";
  });
  $("events").innerHTML = ev || "<li>none yet</li>";
  var q = "<tr><th>quorum</th><th>round</th><th>time (UTC)</th><th>members</th></tr>";
  d.quorums.forEach(function (x) {
    q += "<tr><td>" + x.quorum_id + "</td><td>" + x.round + "</td><td>" +
        esc(x.time) + "</td><td>" + x.members.map(esc).join(", ") + "</td></tr>";
  });
  $("quorums").innerHTML = q;
  $("updated").textContent = "updated " + new Date(d.now_ms).toISOString();
  $("updated").className = "";
}
function poll() {
  fetch("/status", {cache: "no-store"})
    .then(function (r) { return r.json(); })
    .then(render)
    .catch(function (e) {
      $("updated").textContent = "the lighthouse does not answer: " + e;
      $("updated").className = "stale";
    })
    .then(function () { setTimeout(poll, 1000); });
}
$("live").hidden = false;
poll();
