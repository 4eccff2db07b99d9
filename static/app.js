// Review Queue: keyboard, countdowns, the last-look dialog and double-submit guards.
// Loaded as a file (CSP: no inline script); every page works without it, this only speeds it up.
(function () {
  "use strict";

  var TYPING = /^(INPUT|TEXTAREA|SELECT)$/;
  var TEXT_INPUT_TYPES = /^(text|search|number|password|email|url|tel|date|datetime-local|time)$/;

  function isTyping(el) {
    if (!el) return false;
    if (el.isContentEditable) return true;
    if (el.tagName === "INPUT") return TEXT_INPUT_TYPES.test(el.type);
    return TYPING.test(el.tagName);
  }

  function openDialog(dialog) {
    if (dialog && !dialog.open) dialog.showModal();
  }

  // --- countdowns ("2h 03m left", from data-countdown) and ages ("asked 23s ago", from data-age),
  // both ISO times, updated every second. A duration in the server's words (rendering.span: "2d 4h",
  // "3h 05m", "12m", "45s"); the countdown also keeps the seconds under an hour ("4m 05s").
  function span(seconds, withSeconds) {
    var s = withSeconds ? Math.floor(Math.abs(seconds)) : Math.round(Math.abs(seconds));
    var d = Math.floor(s / 86400), h = Math.floor((s % 86400) / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
    var pad = function (n) { return n < 10 ? "0" + n : "" + n; };
    if (d) return d + "d " + h + "h";
    if (h) return h + "h " + pad(m) + "m";
    if (m) return withSeconds ? m + "m " + pad(r) + "s" : m + "m";
    return r + "s";
  }

  function tick() {
    var now = Date.now();
    document.querySelectorAll("[data-age]").forEach(function (el) {
      var since = (now - Date.parse(el.getAttribute("data-age"))) / 1000;
      if (isNaN(since)) return;
      var text = span(since, false) + " ago";
      if (el.textContent !== text) el.textContent = text;
    });
    document.querySelectorAll("[data-countdown]").forEach(function (el) {
      var left = (Date.parse(el.getAttribute("data-countdown")) - now) / 1000;
      if (isNaN(left)) return;
      var text = left <= 0 ? "expired" : span(left, true) + " left";
      if (el.textContent !== text) el.textContent = text;
      el.classList.toggle("soon", left < 3600);
    });
  }

  // --- queue: j/k move between holds, Enter opens (a native link) ---
  function queueLinks() {
    return Array.prototype.slice.call(document.querySelectorAll("#queue-rows a.queue-link, #history-rows a.queue-link"));
  }

  function items() {
    return Array.prototype.slice.call(document.querySelectorAll("fieldset[data-item]"));
  }

  var currentItem = null;

  function focusedItem() {
    var el = document.activeElement;
    var item = el && el.closest ? el.closest("fieldset[data-item]") : null;
    return item || currentItem || items()[0] || null;
  }

  function focusItem(item) {
    if (!item) return;
    currentItem = item;
    var target = item.querySelector("input[type=radio]:checked") || item.querySelector("input[type=radio]") || item;
    if (target === item) item.setAttribute("tabindex", "-1");
    target.focus();
    item.scrollIntoView({ block: "nearest" });
    clearOfBar(target);
  }

  // --- the sticky decide bar never hides the focus (WCAG 2.4.11): scroll what has the focus
  // above the bar; the CSS scroll-padding (from --bar-height) covers the browser's own scrolling ---
  function decideBar() {
    return document.querySelector(".decide-bar");
  }

  function clearOfBar(el) {
    var bar = decideBar();
    if (!el || !bar || bar.contains(el) || !el.getBoundingClientRect) return;
    var top = bar.getBoundingClientRect().top, rect = el.getBoundingClientRect();
    if (rect.bottom > top - 8 && top < window.innerHeight) window.scrollBy(0, rect.bottom - top + 16);
  }

  function measureBar() {
    var bar = decideBar();
    if (bar) document.documentElement.style.setProperty("--bar-height", Math.ceil(bar.offsetHeight) + "px");
  }

  function move(list, step, focusFn) {
    if (!list.length) return;
    var active = document.activeElement;
    var index = list.findIndex(function (el) { return el === active || el.contains(active); });
    if (index === -1 && currentItem) index = list.indexOf(currentItem);
    var next = index === -1 ? (step > 0 ? 0 : list.length - 1) : Math.min(list.length - 1, Math.max(0, index + step));
    focusFn(list[next]);
  }

  function choose(action) {
    var item = focusedItem();
    if (!item) return false;
    var radio = item.querySelector("input[type=radio][value=" + action + "]");
    if (!radio) return false;
    radio.checked = true;
    radio.dispatchEvent(new Event("change", { bubbles: true }));
    currentItem = item;
    if (action === "edit") {
      var first = item.querySelector(".edit-fields input:not([type=checkbox]), .edit-fields textarea");
      (first || radio).focus();
    } else if (action === "feedback") {
      var comment = document.getElementById("comment");
      radio.focus();
      if (comment && !comment.value.trim()) comment.focus();
    } else {
      radio.focus();
    }
    return true;
  }

  function click(id) {
    var el = document.getElementById(id);
    if (el && !el.disabled) { el.click(); return true; }
    return false;
  }

  document.addEventListener("keydown", function (event) {
    var lastLook = document.getElementById("last-look");
    var lookOpen = lastLook && lastLook.open;
    if ((event.ctrlKey || event.metaKey) && event.key === "Enter") {
      // Inside another form (Extend's reason, a filter) it is that form's business, not the decision's.
      var inForm = event.target.closest && event.target.closest("form");
      if (inForm && inForm.id !== "decision-form" && !inForm.classList.contains("confirm")) return;
      // On the last look Ctrl+Enter confirms; on the hold page it submits the decision.
      if ((lookOpen || !lastLook) && click("confirm-decision")) { event.preventDefault(); return; }
      if (!lookOpen && click("submit-decision")) { event.preventDefault(); }
      return;
    }
    if (event.ctrlKey || event.metaKey || event.altKey || isTyping(event.target)) return;
    var help = document.getElementById("keys-help");
    if (event.key === "?") {
      event.preventDefault();
      openDialog(help);
      return;
    }
    if (lookOpen && event.key === "s") {
      // Stay: untick "then open the next hold" (pressed again, tick it back).
      var goNext = document.getElementById("go-next");
      if (goNext) { event.preventDefault(); goNext.checked = !goNext.checked; }
      return;
    }
    if (lookOpen || (help && help.open)) return;
    var links = queueLinks();
    switch (event.key) {
      case "j":
      case "k":
        event.preventDefault();
        if (links.length) move(links, event.key === "j" ? 1 : -1, function (a) { a.focus(); });
        else move(items(), event.key === "j" ? 1 : -1, focusItem);
        return;
      case "a":
        if (click("approve-all")) event.preventDefault();
        return;
      case "g":
        // "Approve and remember…" of the focused item, else of the first approved item.
        var remember = (document.activeElement && document.activeElement.closest &&
          document.activeElement.closest("[data-item]") || document).querySelector("[data-remember]");
        if (remember) { event.preventDefault(); remember.click(); }
        return;
      case "e":
        if (choose("edit")) event.preventDefault();
        return;
      case "r":
        if (choose("reject")) event.preventDefault();
        return;
      case "f":
        if (choose("feedback")) event.preventDefault();
        return;
      case "x":
        // Extend: opens the hold's Extend control and puts the focus on its first field.
        var extend = document.getElementById("extend");
        if (extend) { event.preventDefault(); extend.open = true; document.getElementById("extend-expires-in").focus(); }
        return;
      case "b":
        // Approve by confidence: opens it and shows the server's preview for the chosen threshold.
        var byConfidence = document.getElementById("by-confidence");
        if (byConfidence && !byConfidence.hidden) {
          event.preventDefault();
          byConfidence.open = true;
          document.getElementById("bc-threshold").focus();
          click("bc-preview-button");
        }
        return;
      case "o":
        // "I'm on it": takes the soft claim (or releases one's own).
        if (click("claim-button")) { event.preventDefault(); return; }
        // Someone else is on it: say why nothing happened (only they, or the claim's end, free it).
        var claim = document.querySelector("#presence .claim:not(.claim-mine)");
        if (claim) {
          event.preventDefault();
          var note = document.getElementById("claim-note");
          if (!note) {
            note = document.createElement("span");
            note.id = "claim-note";
            note.className = "muted";
            claim.parentNode.appendChild(note);
          }
          note.textContent = claim.textContent + ": only they can release it, or it lapses by itself.";
        }
        return;
      case "c":
        var comment = document.getElementById("comment");
        if (comment) { event.preventDefault(); comment.focus(); }
        return;
    }
  });

  // --- the comment's counter (the server refuses more than data-max characters, with the same count) ---
  function countChars(field) {
    var counter = document.getElementById(field.getAttribute("data-count"));
    if (!counter) return;
    var max = parseInt(counter.getAttribute("data-max"), 10);
    // Code points, as the server counts them (an emoji is one character, not two).
    var n = Array.from(field.value).length;
    counter.textContent = n > max ? n + " of " + max + " characters: " + (n - max) + " too many" : n + " of " + max + " characters";
    counter.classList.toggle("over", n > max);
  }

  document.addEventListener("input", function (event) {
    var el = event.target;
    if (el.hasAttribute && el.hasAttribute("data-count")) countChars(el);
    // A null field's text: typing in it means "not null" (the box would otherwise keep it null).
    var row = el.closest && el.closest(".null-row");
    if (row && el.type === "text") {
      var box = row.querySelector("input[type=checkbox]");
      if (box && el.value) box.checked = false;
    }
  });

  document.addEventListener("focusin", function (event) {
    var item = event.target.closest && event.target.closest("fieldset[data-item]");
    if (item) currentItem = item;
    clearOfBar(event.target);
  });

  // --- forms: one submit per click, however fast the clicks ---
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.hasAttribute("data-once")) return;
    if (form.dataset.sent === "1") { event.preventDefault(); return; }
    form.dataset.sent = "1";
    // Disabled after this tick, so that this submission still carries the button.
    setTimeout(function () {
      form.querySelectorAll("button[type=submit]").forEach(function (b) { b.disabled = true; });
    }, 0);
  }, true);

  document.addEventListener("click", function (event) {
    // Approve by confidence, applied: checks Approve on the items the server's preview listed.
    var apply = event.target.closest && event.target.closest("#bc-apply");
    if (apply) {
      apply.dataset.approve.split(" ").forEach(function (prefix) {
        var radio = document.getElementById(prefix + "-approve");
        if (radio) radio.click();
      });
      var applied = document.getElementById("bc-applied");
      if (applied) applied.value = apply.dataset.items;
      var threshold = document.getElementById("bc-applied-threshold");
      if (threshold) threshold.value = apply.dataset.threshold;
      apply.textContent = "Approve set; decide the rest, then submit";
      apply.disabled = true;
      return;
    }
    var close = event.target.closest && event.target.closest("[data-close-dialog]");
    if (close) {
      var dialog = close.closest("dialog");
      if (dialog) { event.preventDefault(); dialog.close(); }
      return;
    }
    if (event.target.id === "keys-open") openDialog(document.getElementById("keys-help"));
  });

  // --- htmx: the last look opens as a dialog; a refused form shows its first error ---
  document.addEventListener("htmx:afterSwap", function (event) {
    var target = event.detail.target;
    if (target && target.id === "last-look-body") {
      var dialog = document.getElementById("last-look");
      openDialog(dialog);
      // With points worth a second look, the focus starts on their tick, not on Confirm.
      var confirm = document.getElementById("second-look-ack") || document.getElementById("confirm-decision");
      (confirm || dialog).focus();
    }
    if (target && target.id === "bc-preview") clearOfBar(target);
    if (target && target.id === "decision-form") {
      document.querySelectorAll("[data-count]").forEach(countChars);
      var errors = document.getElementById("form-errors");
      var firstBad = document.querySelector("#decision-form [aria-invalid=true], #decision-form .error");
      if (errors) errors.focus();
      if (firstBad && firstBad.scrollIntoView) firstBad.scrollIntoView({ block: "center" });
    }
    tick();
  });

  // The rows refresh themselves; a person who is reading a dialog or typing is not interrupted.
  document.addEventListener("htmx:beforeRequest", function (event) {
    var elt = event.detail.elt;
    if (elt && elt.id === "queue-rows" && document.hidden) event.preventDefault();
  });

  document.addEventListener("DOMContentLoaded", function () {
    document.querySelectorAll(".js-only[hidden]").forEach(function (el) { el.hidden = false; });
    document.documentElement.classList.add("js");
    tick();
    setInterval(tick, 1000);
    measureBar();
    window.addEventListener("resize", measureBar);
    document.querySelectorAll("[data-count]").forEach(countChars);
  });
})();

// The installable app (web/app.py): register the service worker where the browser has one, and let a
// person turn on Web Push for holds they may decide. Without either, every page works the same.
(function () {
  "use strict";
  if (!("serviceWorker" in navigator)) return;
  navigator.serviceWorker.register("/sw.js", { scope: "/" }).catch(function () {});

  function keyBytes(base64url) {
    var padded = (base64url + "===".slice((base64url.length + 3) % 4)).replace(/-/g, "+").replace(/_/g, "/");
    var raw = atob(padded);
    var out = new Uint8Array(raw.length);
    for (var i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  }

  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("push-on");
    if (!button || !("PushManager" in window)) return;
    var url = button.getAttribute("data-url");
    fetch(url, { credentials: "same-origin" }).then(function (r) { return r.json(); }).then(function (body) {
      if (!body.public_key) return;
      button.hidden = false;
      button.addEventListener("click", function () {
        navigator.serviceWorker.ready.then(function (reg) {
          return reg.pushManager.subscribe({ userVisibleOnly: true, applicationServerKey: keyBytes(body.public_key) });
        }).then(function (sub) {
          var token = document.querySelector("[name=csrfmiddlewaretoken]");
          return fetch(url, {
            method: "POST",
            credentials: "same-origin",
            headers: { "Content-Type": "application/json", "X-CSRFToken": token ? token.value : "" },
            body: JSON.stringify(sub.toJSON()),
          });
        }).then(function (r) {
          button.textContent = r && r.ok ? "Push on" : "Push failed";
          button.setAttribute("aria-label", button.textContent);
          button.disabled = true;
        }).catch(function () { button.textContent = "Push blocked"; button.setAttribute("aria-label", "Push notifications blocked"); });
      });
    }).catch(function () {});
  });
})();
