"use strict";
(function () {
  var tipBox = document.getElementById("tip");
  function show(el, x, y) {
    tipBox.textContent = el.getAttribute("data-tip");
    tipBox.hidden = false;
    var w = tipBox.offsetWidth, h = tipBox.offsetHeight;
    var left = Math.min(x + 14, window.innerWidth - w - 8), top = y + 14;
    if (top + h > window.innerHeight - 8) { top = y - h - 10; }
    tipBox.style.left = Math.max(left, 4) + "px";
    tipBox.style.top = Math.max(top, 4) + "px";
  }
  function hide() { tipBox.hidden = true; }
  document.querySelectorAll("[data-tip]").forEach(function (el) {
    el.addEventListener("mouseenter", function (e) { show(el, e.clientX, e.clientY); });
    el.addEventListener("mousemove", function (e) { show(el, e.clientX, e.clientY); });
    el.addEventListener("mouseleave", hide);
    el.addEventListener("focus", function () {
      var r = el.getBoundingClientRect();
      show(el, r.left + r.width / 2, r.top + r.height / 2);
    });
    el.addEventListener("blur", hide);
  });

  function value(row, i) {
    var c = row.cells[i];
    return c ? (c.getAttribute("data-v") || c.textContent) : "";
  }
  function sortBy(table, th, i) {
    var asc = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", asc ? "ascending" : "descending");
    var body = table.tBodies[0];
    var rows = Array.prototype.slice.call(body.rows);
    rows.forEach(function (r, k) { r._k = k; });
    rows.sort(function (a, b) {
      var x = value(a, i), y = value(b, i), nx = Number(x), ny = Number(y);
      var numeric = x !== "" && y !== "" && isFinite(nx) && isFinite(ny);
      var d = numeric ? nx - ny : (x < y ? -1 : x > y ? 1 : 0);
      return (asc ? d : -d) || a._k - b._k;
    });
    rows.forEach(function (r) { body.appendChild(r); });
  }
  document.querySelectorAll("table.sortable").forEach(function (table) {
    table.querySelectorAll("th").forEach(function (th, i) {
      th.tabIndex = 0;
      th.addEventListener("click", function () { sortBy(table, th, i); });
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") { sortBy(table, th, i); } });
    });
  });

  function applyFilter(id) {
    var table = document.getElementById(id);
    var text = document.querySelector('[data-filter="' + id + '"]');
    var status = document.querySelector('[data-status="' + id + '"]');
    var q = text ? text.value.toLowerCase() : "", s = status ? status.value : "", shown = 0;
    Array.prototype.forEach.call(table.tBodies[0].rows, function (r) {
      var ok = (!q || r.textContent.toLowerCase().indexOf(q) >= 0) && (!s || r.getAttribute("data-status") === s);
      r.hidden = !ok;
      if (ok) { shown += 1; }
    });
    var count = document.getElementById(id.replace("-table", "-shown"));
    if (count) { count.textContent = shown + " of " + table.tBodies[0].rows.length + " shown"; }
  }
  document.querySelectorAll("[data-filter],[data-status]").forEach(function (el) {
    var id = el.getAttribute("data-filter") || el.getAttribute("data-status");
    el.addEventListener("input", function () { applyFilter(id); });
    el.addEventListener("change", function () { applyFilter(id); });
  });
})();
