"use strict";
(function () {
  var data = JSON.parse(document.getElementById("lg-runs").textContent);
  var words = data.words, rows = data.rows, names = {};
  data.series.forEach(function (s) { names[s[0]] = s[1]; });
  var PAGE = 100;
  var state = { outcomes: null, series: "", unexpectedOnly: false, page: 0 };

  function el(tag, text, cls) {
    var node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = String(text);
    if (cls) node.className = cls;
    return node;
  }

  // Outcome checkboxes, one per outcome present, with its count.
  var outcomeCounts = {};
  rows.forEach(function (r) { outcomeCounts[r[2]] = (outcomeCounts[r[2]] || 0) + 1; });
  var boxes = document.getElementById("outcome-filters");
  var checked = {};
  Object.keys(outcomeCounts).forEach(function (code) {
    var label = el("label"), box = el("input");
    box.type = "checkbox"; box.checked = true; box.value = code; box.className = "outcome-filter";
    box.dataset.outcome = words[code];
    checked[code] = true;
    box.addEventListener("change", function () { checked[code] = box.checked; state.page = 0; draw(); });
    label.appendChild(box);
    label.appendChild(document.createTextNode(" " + words[code] + " (" + outcomeCounts[code] + ")"));
    boxes.appendChild(label);
  });

  var select = document.getElementById("series-filter-runs");
  data.series.forEach(function (s) {
    var option = el("option", s[0] + ". " + s[1]);
    option.value = String(s[0]);
    select.appendChild(option);
  });
  select.addEventListener("change", function () { state.series = select.value; state.page = 0; draw(); });
  var only = document.getElementById("unexpected-only");
  only.addEventListener("change", function () { state.unexpectedOnly = only.checked; state.page = 0; draw(); });
  document.getElementById("prev-page").addEventListener("click", function () {
    if (state.page > 0) { state.page -= 1; draw(); }
  });
  document.getElementById("next-page").addEventListener("click", function () { state.page += 1; draw(); });

  function selected() {
    return rows.filter(function (r) {
      if (!checked[r[2]]) return false;
      if (state.series && String(r[0]) !== state.series) return false;
      if (state.unexpectedOnly && r[9]) return false;
      return true;
    });
  }

  function draw() {
    var chosen = selected();
    var pages = Math.max(1, Math.ceil(chosen.length / PAGE));
    if (state.page >= pages) state.page = pages - 1;
    var start = state.page * PAGE, shown = chosen.slice(start, start + PAGE);
    var body = document.getElementById("runs-body");
    body.textContent = "";
    shown.forEach(function (r) {
      var tr = el("tr", null, r[9] ? "accepted" : "unexpected");
      tr.appendChild(el("td", names[r[0]], "name"));
      tr.appendChild(el("td", r[1] + 1));
      var outcome = el("td"), badge = el("span", words[r[2]], "badge");
      badge.style.background = (data.colours[words[r[2]]] || "#555");
      outcome.appendChild(badge);
      if (!r[9]) outcome.appendChild(el("span", " unexpected", "muted"));
      tr.appendChild(outcome);
      tr.appendChild(el("td", words[r[3]]));
      tr.appendChild(el("td", r[4].toFixed(3) + " s"));
      tr.appendChild(el("td", r[5]));
      tr.appendChild(el("td", words[r[6]]));
      tr.appendChild(el("td", words[r[7]]));
      var link = el("td");
      var anchor = "r" + r[0] + "-" + r[1];
      if (document.getElementById(anchor)) {
        var a = el("a", "on this page"); a.href = "#" + anchor; link.appendChild(a);
        link.appendChild(document.createTextNode(" "));
      }
      if (r[8]) { var f = el("a", "folder"); f.href = r[8]; link.appendChild(f); }
      tr.appendChild(link);
      body.appendChild(tr);
    });
    var info = chosen.length ? ("runs " + (start + 1) + "-" + (start + shown.length) + " of " + chosen.length)
                             : "no run matches";
    if (chosen.length !== rows.length) info += " (filtered from " + rows.length + ")";
    document.getElementById("page-info").textContent = info + ", page " + (state.page + 1) + " of " + pages;
    document.getElementById("prev-page").disabled = state.page === 0;
    document.getElementById("next-page").disabled = state.page >= pages - 1;
  }

  // The summary: a name filter, and the expected series folded away when there are many.
  var filter = document.getElementById("series-filter");
  var showExpected = document.getElementById("show-expected");
  function filterSeries() {
    var needle = filter.value.toLowerCase();
    document.querySelectorAll("#series-table tbody tr").forEach(function (tr) {
      var matches = tr.dataset.name.toLowerCase().indexOf(needle) >= 0;
      var folded = tr.classList.contains("expected") && !showExpected.checked && !needle;
      tr.hidden = !matches || folded;
    });
  }
  filter.addEventListener("input", filterSeries);
  showExpected.addEventListener("change", filterSeries);
  filterSeries();

  document.querySelectorAll("button.copy").forEach(function (button) {
    button.addEventListener("click", function () {
      var text = document.getElementById(button.dataset.copy).textContent;
      function done() { button.textContent = "copied"; }
      if (navigator.clipboard && navigator.clipboard.writeText) {
        navigator.clipboard.writeText(text).then(done, function () { fallback(text); done(); });
      } else { fallback(text); done(); }
    });
  });
  function fallback(text) {
    var area = el("textarea"); area.value = text; document.body.appendChild(area);
    area.select(); try { document.execCommand("copy"); } catch (e) { /* the text stays selectable */ }
    area.remove();
  }
  draw();
})();
