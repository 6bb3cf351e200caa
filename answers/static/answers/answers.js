// Cited Answers: the ask page's client. No build step, no dependencies.
// Streamed tokens are appended as text, never as markup. Only HTML the server rendered
// and sanitized (the final answer and the Sources panels) is inserted as HTML.
(function () {
  "use strict";

  // The cookie's token, read at each request: logging in again (in another tab) rotates
  // it, and the one rendered into a page left open would be refused.
  function csrfToken(root) {
    var cookie = document.cookie.split("; ").find(function (part) { return part.indexOf("csrftoken=") === 0; });
    if (cookie) return decodeURIComponent(cookie.slice("csrftoken=".length));
    var input = root.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function replaceWithHtml(element, html) {
    var holder = document.createElement("div");
    holder.innerHTML = html;
    var fresh = holder.firstElementChild;
    if (fresh) element.replaceWith(fresh);
    return fresh;
  }

  function setupFeedback(root, turn) {
    var form = turn.querySelector("[data-feedback]");
    if (!form || form.dataset.bound) return;
    form.dataset.bound = "1";
    var status = form.querySelector(".feedback-status");
    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var rating = event.submitter ? event.submitter.value : "up";
      var comment = form.querySelector("input[name=comment]").value;
      var answerId = turn.dataset.answerId;
      if (!answerId) return;
      status.textContent = "Sending…";
      fetch(root.dataset.feedbackUrl + encodeURIComponent(answerId) + "/feedback", {
        method: "POST",
        credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRFToken": csrfToken(root) },
        // An empty box keeps the comment given earlier (the API's rule): a second click
        // on a rating must not erase it.
        body: JSON.stringify(comment.trim() ? { rating: rating, comment: comment } : { rating: rating }),
      })
        .then(function (response) {
          status.textContent = response.ok ? "Thanks for your feedback."
            : response.status === 401 ? "Feedback could not be saved: your session has ended. Log in again (in another tab) and send it again."
            : "Feedback could not be saved.";
        })
        .catch(function () {
          status.textContent = "Feedback could not be saved.";
        });
    });
  }

  function setupReadonly(root) {
    root.querySelectorAll("[data-turn]").forEach(function (turn) {
      setupFeedback(root, turn);
    });
  }

  // One socket with reconnection: onOpen runs on every (re)connection, so the caller can
  // resume the answer it was following from the last sequence number it saw.
  function answerSocket(handlers) {
    var socket = null;
    var delay = 1000;
    var backoff = 1000; // the next wait, had the last open failed
    var retry = null;
    var self = {
      send: function (message) {
        if (socket && socket.readyState === WebSocket.OPEN) {
          socket.send(JSON.stringify(message));
          return true;
        }
        return false;
      },
      // Accepted only to hear "unavailable" (the database or the channel layer is away):
      // try again later, backing off as for a connection that failed, not every second.
      refused: function () {
        delay = backoff;
        if (socket && socket.readyState <= WebSocket.OPEN) socket.close();
      },
    };
    function connect() {
      retry = null;
      var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
      socket = new WebSocket(scheme + window.location.host + "/ws/answers/");
      socket.addEventListener("open", function () {
        backoff = delay;
        delay = 1000;
        handlers.onOpen();
      });
      socket.addEventListener("message", function (event) {
        handlers.onMessage(JSON.parse(event.data));
      });
      socket.addEventListener("close", function (event) {
        if (event.code === 4401) {
          // Signed out (in another tab, or the session expired): no use trying again.
          // The page decides whether to go and log in now (onSignedOut returns true when
          // it follows or sends something) or to say so and let the reader read on.
          if (!handlers.onSignedOut || handlers.onSignedOut()) toLogin();
          return;
        }
        if (event.code === 4403) return; // may not ask: its error said so; trying again won't help
        handlers.onLost();
        retry = window.setTimeout(connect, delay);
        delay = Math.min(delay * 2, 10000);
      });
    }
    // Back online: try now, not at the end of a back-off that may have grown to 10 s (a
    // try under way when it comes, if it fails, retries after the first step, 1 s).
    window.addEventListener("online", function () {
      delay = 1000;
      if (retry === null) return;
      window.clearTimeout(retry);
      connect();
    });
    connect();
    return self;
  }

  var UNAVAILABLE = "The service is unavailable right now.";

  // To the login page, and back here after it.
  function loginUrl() {
    return "/accounts/login/?next=" + encodeURIComponent(window.location.pathname);
  }

  function toLogin() {
    window.location.href = loginUrl();
  }

  // "Your session has ended. Log in again", in a status line: ``before`` runs on the click.
  function sayLogInAgain(status, before) {
    status.textContent = "Your session has ended. ";
    var link = document.createElement("a");
    link.href = loginUrl();
    link.textContent = "Log in again";
    if (before) link.addEventListener("click", before);
    status.appendChild(link);
  }

  // A refusal to follow, for now: the database or the channel layer cannot be reached
  // (a socket opened then is closed 4503). An answer's own last word has a seq.
  function isUnavailable(message) {
    return message.type === "error" && message.code === "unavailable" && typeof message.seq !== "number";
  }

  var PHASES = {
    searching: "Searching your documents…",
    writing: "Writing the answer…",
  };
  // As answers.models.Answer.Status labels them (the answer page's status line).
  var STATUS_LABELS = {
    complete: "Complete",
    no_answer: "No answer",
    failed: "Failed",
    interrupted: "Interrupted",
  };
  var OUTCOMES = {
    interrupted: "Stopped before it finished.",
    failed: "This answer failed.",
  };

  // Renders one answer's stream into its turn; remembers the last sequence number seen.
  function turnView(root, turn) {
    var progress = turn.querySelector("[data-turn-progress]");
    var view = {
      turn: turn,
      answer: turn.querySelector("[data-answer]"),
      slot: turn.querySelector("[data-sources-slot]"),
      answerId: turn.dataset.answerId || null,
      seq: 0,
      // Apply one event; returns true when the stream has ended.
      apply: function (message) {
        if (typeof message.seq === "number") {
          if (message.seq <= view.seq) return false; // already shown
          view.seq = message.seq;
        }
        switch (message.type) {
          case "references":
            view.answerId = String(message.answer_id);
            turn.dataset.answerId = view.answerId;
            view.answer.textContent = "";
            view.slot.innerHTML = "";
            view.slot.insertAdjacentHTML("afterbegin", message.sources_html);
            view.phase("writing");
            return false;
          case "token":
            view.answer.appendChild(document.createTextNode(message.text));
            return false;
          case "citation":
            var entry = view.slot.querySelector('[data-number="' + Number(message.number) + '"]');
            if (entry) entry.classList.add("cited");
            return false;
          case "done":
            view.answer.innerHTML = message.html;
            var panel = view.slot.querySelector("[data-sources-panel]");
            // Focus inside the panel being swapped would fall to the page: keep it here.
            var hadFocus = panel && panel.contains(document.activeElement);
            if (panel) panel = replaceWithHtml(panel, message.sources_html);
            else view.slot.insertAdjacentHTML("afterbegin", message.sources_html);
            if (hadFocus && panel) panel.querySelector("h3").focus();
            turn.querySelector("[data-answer-markdown]").content.textContent = message.text;
            turn.dataset.status = message.status;
            turn.querySelector("[data-feedback]").hidden = false;
            setupFeedback(root, turn);
            view.finish("done", null, OUTCOMES[message.status]);
            return true;
          case "error":
            // "unavailable" as the stream's last word: the answer is written and is
            // stored once the database is back; asking again would only repeat it.
            view.finish("error", message.message, null, message.code === "unavailable");
            return true;
        }
        return false;
      },
      phase: function (name) {
        progress.hidden = false;
        progress.querySelector("[data-turn-progress-text]").textContent = PHASES[name];
        turn.dataset.phase = name;
      },
      streaming: function () {
        view.answer.dataset.answerState = "streaming";
        view.answer.setAttribute("aria-busy", "true");
        view.phase("searching");
      },
      // An ended stream: an error shows its message; a stored answer that did not
      // complete says how it ended. Either can be asked again.
      finish: function (state, message, outcome, kept) {
        view.answer.dataset.answerState = state;
        view.answer.setAttribute("aria-busy", "false");
        progress.hidden = true;
        delete turn.dataset.phase;
        if (message) {
          var p = document.createElement("p");
          p.className = "error";
          p.setAttribute("role", "alert");
          p.textContent = message;
          view.answer.appendChild(p);
        }
        if (outcome) {
          var note = document.createElement("p");
          note.className = "turn-outcome";
          note.dataset.turnOutcome = "";
          note.textContent = outcome;
          view.answer.insertAdjacentElement("afterend", note);
        }
        var actions = turn.querySelector("[data-turn-actions]");
        actions.hidden = false;
        actions.querySelector("[data-copy-answer]").hidden = state !== "done";
        var retry = actions.querySelector("[data-retry]");
        retry.hidden = !(message || outcome) || kept || !root.hasAttribute("data-ask");
      },
    };
    return view;
  }

  // --- Copy: the answer's Markdown with its numbered sources under it ---------------------

  function answerMarkdown(turn) {
    var text = turn.querySelector("[data-answer-markdown]").content.textContent.trim();
    var lines = [];
    turn.querySelectorAll("[data-sources-panel] [data-title]").forEach(function (entry) {
      var href = new URL(entry.dataset.href, window.location.href).href;
      lines.push("[" + entry.dataset.number + "] " + entry.dataset.title + " <" + href + ">");
    });
    return lines.length ? text + "\n\nSources:\n" + lines.join("\n") + "\n" : text + "\n";
  }

  function copyText(text) {
    // The Clipboard API needs a secure context (https or localhost); elsewhere the
    // selection is copied the old way.
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.className = "visually-hidden";
      document.body.appendChild(area);
      area.select();
      var ok = document.execCommand("copy");
      area.remove();
      if (ok) resolve();
      else reject(new Error("copy refused"));
    });
  }

  function setupCopy() {
    document.addEventListener("click", function (event) {
      var button = event.target.closest("[data-copy-answer]");
      if (!button) return;
      var turn = button.closest("[data-turn]");
      var status = turn.querySelector("[data-copy-status]");
      copyText(answerMarkdown(turn)).then(
        function () { status.textContent = "Copied, with its sources."; },
        function () { status.textContent = "Could not copy: select the text instead."; }
      );
    });
  }

  // --- Citation previews: the cited source's title and first words, from the panel -----

  function setupPreviews() {
    var preview = document.querySelector("[data-citation-preview]");
    if (!preview) return;
    var shownFor = null;
    function entryFor(link) {
      var id = (link.getAttribute("href") || "").slice(1);
      var entry = id && document.getElementById(id);
      return entry && entry.dataset.title ? entry : null;
    }
    function show(link) {
      var entry = entryFor(link);
      if (!entry) return;
      preview.textContent = "";
      var title = document.createElement("strong");
      title.textContent = entry.dataset.number + ". " + entry.dataset.title;
      var where = entry.querySelector(".source-where");
      var place = document.createElement("span");
      place.className = "preview-where";
      place.textContent = where ? where.textContent.trim() : "";
      var words = document.createElement("p");
      words.textContent = entry.dataset.snippet;
      preview.append(title, place, words);
      preview.hidden = false;
      var box = link.getBoundingClientRect();
      var left = Math.min(box.left + window.scrollX, window.scrollX + document.documentElement.clientWidth - preview.offsetWidth - 8);
      preview.style.left = Math.max(window.scrollX + 4, left) + "px";
      preview.style.top = box.bottom + window.scrollY + 6 + "px";
      link.setAttribute("aria-describedby", preview.id);
      shownFor = link;
    }
    function hide() {
      if (shownFor) shownFor.removeAttribute("aria-describedby");
      shownFor = null;
      preview.hidden = true;
    }
    document.addEventListener("mouseover", function (event) {
      var link = event.target.closest && event.target.closest("a.citation");
      if (link && link !== shownFor) show(link);
      else if (!link && shownFor && !preview.contains(event.target)) hide();
    });
    document.addEventListener("focusin", function (event) {
      if (event.target.matches && event.target.matches("a.citation")) show(event.target);
      else hide();
    });
    document.addEventListener("keydown", function (event) {
      if (event.key === "Escape" && shownFor) hide();
    });
    document.addEventListener("click", function (event) {
      // Following the citation scrolls to its card: open its passage there.
      var link = event.target.closest && event.target.closest("a.citation");
      var entry = link && entryFor(link);
      hide();
      if (entry) {
        var passage = entry.querySelector("details");
        if (passage) passage.open = true;
      }
    });
  }

  var INFLIGHT_KEY = "cited-answers:inflight";
  // A question typed (or asked and never begun) when the session ended, kept in this tab
  // across the login page and put back in the box.
  var DRAFT_KEY = "cited-answers:draft";
  var ZERO_UUID = "00000000-0000-0000-0000-000000000000";

  function remember(value) {
    try {
      if (value) window.sessionStorage.setItem(INFLIGHT_KEY, JSON.stringify(value));
      else window.sessionStorage.removeItem(INFLIGHT_KEY);
    } catch (e) {
      /* storage may be disabled: resuming after a reload is a nicety */
    }
  }

  function remembered() {
    try {
      return JSON.parse(window.sessionStorage.getItem(INFLIGHT_KEY) || "null");
    } catch (e) {
      return null;
    }
  }

  function keepDraft(text) {
    try {
      if (text.trim()) window.sessionStorage.setItem(DRAFT_KEY, text);
    } catch (e) {
      /* storage may be disabled */
    }
  }

  function takeDraft() {
    try {
      var text = window.sessionStorage.getItem(DRAFT_KEY) || "";
      window.sessionStorage.removeItem(DRAFT_KEY);
      return text;
    } catch (e) {
      return "";
    }
  }

  function setupAsk(root) {
    var form = root.querySelector("[data-ask-form]");
    var textarea = form.querySelector("textarea");
    var askButton = root.querySelector("[data-ask-button]");
    var stopButton = root.querySelector("[data-stop-button]");
    var newLink = root.querySelector("[data-new-conversation]");
    var status = root.querySelector("[data-ask-status]");
    var turns = root.querySelector("[data-turns]");
    var template = root.querySelector("[data-turn-template]");
    var conversationId = root.dataset.conversationId || null;
    var current = null;
    var pending = null;
    var stopWanted = false;
    var unbegun = ""; // the question a "signed_out" refused
    var signedOut = false; // the socket was closed 4401 with nothing under way

    function setBusy(busy) {
      askButton.disabled = busy;
      stopButton.disabled = !busy;
    }

    // The address becomes the conversation's: a reload, or Back after following a source,
    // shows every turn from the store (and follows one still being written), not an empty page.
    function showConversationUrl() {
      var template = root.dataset.conversationUrl;
      if (!conversationId || !template || !window.history.replaceState) return;
      var url = template.replace(ZERO_UUID, encodeURIComponent(conversationId));
      if (url !== window.location.pathname) window.history.replaceState(null, "", url);
    }

    function newTurn(question) {
      var fragment = template.content.cloneNode(true);
      fragment.querySelector(".turn-question").textContent = question;
      turns.appendChild(fragment);
      var view = turnView(root, turns.lastElementChild);
      view.streaming();
      return view;
    }

    function ended() {
      current = null;
      stopWanted = false;
      remember(null);
      setBusy(false);
      // Back to the question for the follow-up, unless the reader has moved on (into the
      // answer or its sources): focus is never taken from where someone is reading.
      var active = document.activeElement;
      if (!active || active === document.body || form.contains(active)) textarea.focus();
    }

    // Only the socket's own "Reconnecting…" is cleared when it opens: a slow first
    // connection must not wipe what the form said meanwhile ("Type a question first.").
    var reconnecting = false;
    var away = false; // the last socket was refused "unavailable"
    var socket = answerSocket({
      onOpen: function () {
        if (reconnecting) status.textContent = "";
        reconnecting = false;
        away = false;
        if (current && current.answerId && !pending) {
          // Back after a drop (maybe on another server): the rest of the same answer.
          pending = { type: "resume", answer_id: Number(current.answerId), after: current.seq };
        }
        if (pending && socket.send(pending)) pending = null;
        // A Stop pressed while the socket was down goes to the answer now (the server
        // takes it on the resumed answer's first event).
        if (stopWanted && current && !pending && socket.send({ type: "stop" })) stopWanted = false;
      },
      onLost: function () {
        if (current && !current.answerId && !pending) {
          // The question may never have arrived: there is nothing to resume. (One still
          // waiting in `pending` was never sent: it goes when the socket is back.)
          current.finish("error", "The connection was lost. Please ask again.");
          ended();
        }
        var again = away ? UNAVAILABLE + " Trying again…" : "Reconnecting…";
        status.textContent = !current ? again
          : stopWanted ? again + " the answer is stopped when the connection is back."
          : current.answerId ? again + " the answer goes on."
          : again + " your question is sent when the connection is back.";
        reconnecting = true;
      },
      onSignedOut: function () {
        // A question never sent, or refused before it began, is not in the store.
        var draft = textarea.value;
        if (!draft.trim() && pending && pending.type === "ask") draft = pending.question;
        if (!draft.trim() && unbegun) draft = unbegun;
        keepDraft(draft);
        if (current && !current.answerId) remember(null); // the draft has it
        if (current || pending) return true; // an answer or a question needs it now
        // Nothing under way: the reader is not taken from the page; the next question,
        // or the link, goes to log in, with what is in the box.
        signedOut = true;
        sayLogInAgain(status, function () { keepDraft(textarea.value); });
        return false;
      },
      onMessage: function (message) {
        if (message.type === "error" && message.code === "signed_out") {
          // Not the answer's end: the socket closes 4401 next, and onSignedOut decides.
          if (current && !current.answerId) unbegun = current.turn.querySelector(".turn-question").textContent;
          if (!current) status.textContent = message.message;
          return;
        }
        if (isUnavailable(message) && (!current || current.answerId)) {
          // Not the answer's end (that one has a seq): it is being written, or stored,
          // without the database; follow it again once the server can tell.
          away = true;
          status.textContent = message.message;
          socket.refused();
          return;
        }
        if (message.type === "error" && !current) {
          status.textContent = message.message;
          return;
        }
        if (!current) return;
        if (message.type === "references") {
          conversationId = message.conversation_id;
          showConversationUrl();
        }
        if (current.apply(message)) {
          ended();
          return;
        }
        if (current.answerId) {
          remember({
            answerId: current.answerId,
            question: current.turn.querySelector(".turn-question").textContent,
            conversationId: conversationId,
          });
        }
      },
    });

    // Said in the form, never cut silently: a pasted question over the limit stays whole
    // for the user to shorten, and a blank one gets a word. Counted as the server counts
    // (code points of the trimmed text).
    var hint = root.querySelector("[data-question-hint]");
    var maxLength = Number(textarea.dataset.maxLength) || 0;
    var usualHint = hint ? hint.textContent : "";
    function questionProblem() {
      var length = Array.from(textarea.value.trim()).length;
      if (maxLength && length > maxLength) {
        return "Your question is " + length.toLocaleString() + " characters; the limit is " +
          maxLength.toLocaleString() + ". Shorten it by " + (length - maxLength).toLocaleString() +
          " to ask.";
      }
      return "";
    }
    function showQuestionHint() {
      var problem = questionProblem();
      if (hint) {
        hint.textContent = problem || usualHint;
        hint.classList.toggle("question-hint-error", !!problem);
      }
      textarea.setAttribute("aria-invalid", problem ? "true" : "false");
      return problem;
    }
    textarea.addEventListener("input", function () {
      showQuestionHint();
      if (status.dataset.blank) {
        status.textContent = "";
        delete status.dataset.blank;
      }
    });

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      if (current) return;
      var question = textarea.value.trim();
      if (!question) {
        status.textContent = "Type a question first.";
        status.dataset.blank = "1";
        textarea.focus();
        return;
      }
      if (showQuestionHint()) {
        textarea.focus();
        return;
      }
      if (signedOut) {
        keepDraft(textarea.value);
        toLogin();
        return;
      }
      current = newTurn(question);
      setBusy(true);
      textarea.value = "";
      // Until its answer begins, a reload would lose it: it has no answer to follow yet
      // (and a socket that goes with the page takes an ask not yet begun with it).
      remember({ answerId: null, question: question, conversationId: conversationId });
      var message = { type: "ask", question: question, conversation_id: conversationId };
      if (!socket.send(message)) pending = message;
    });
    textarea.addEventListener("keydown", function (event) {
      // Enter asks, and so does Ctrl/Cmd+Enter (the habit from other chat tools);
      // Shift+Enter is a new line.
      // An Enter that confirms an input method's composition (Japanese, Chinese...) is not one.
      if (event.isComposing || event.keyCode === 229) return;
      if (event.key === "Enter" && (!event.shiftKey || event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    document.addEventListener("keydown", function (event) {
      // "/" comes back to the question box from anywhere but a field.
      var target = event.target;
      var typing = target.closest && target.closest("input, textarea, select, [contenteditable]");
      if (event.key === "/" && !typing && !event.ctrlKey && !event.metaKey && !event.altKey) {
        event.preventDefault();
        textarea.focus();
      }
    });
    stopButton.addEventListener("click", function () {
      if (!current) return;
      if (pending && pending.type === "ask") {
        // Never sent: there is nothing to stop on the server, and asking it only to stop
        // it would store an answer nobody wanted. The question goes back in the box.
        var question = pending.question;
        pending = null;
        current.turn.remove();
        ended();
        if (!textarea.value.trim()) textarea.value = question;
        showQuestionHint();
        status.textContent = "Not sent: your question is back in the box.";
        return;
      }
      // While the socket is down, the Stop waits for it (see onOpen), not lost.
      if (!socket.send({ type: "stop" })) {
        stopWanted = true;
        status.textContent = (away ? UNAVAILABLE + " Trying again…" : "Reconnecting…") +
          " the answer is stopped when the connection is back.";
      }
    });
    newLink.addEventListener("click", function () {
      remember(null); // a fresh page, not the answer being written
    });
    turns.addEventListener("click", function (event) {
      var retry = event.target.closest("[data-retry]");
      if (!retry || current) return;
      textarea.value = retry.closest("[data-turn]").querySelector(".turn-question").textContent;
      showQuestionHint();
      form.requestSubmit();
    });
    turns.querySelectorAll("[data-turn]").forEach(function (turn) {
      setupFeedback(root, turn);
      if (turn.dataset.status === "failed" || turn.dataset.status === "interrupted") {
        turn.querySelector("[data-retry]").hidden = false;
      }
    });

    // Back from logging in again: what was typed (or refused) before is in the box.
    var draft = takeDraft();
    if (draft && !textarea.value) {
      textarea.value = draft;
      showQuestionHint();
    }

    // A conversation whose last answer is still being written: follow it from the start.
    var last = turns.lastElementChild;
    var inflight = remembered();
    if (last && last.dataset.status === "streaming") {
      current = turnView(root, last);
      current.streaming();
      setBusy(true);
      pending = { type: "resume", answer_id: Number(current.answerId), after: 0 };
    } else if (inflight && inflight.answerId && !root.dataset.conversationId) {
      // Reloaded while an answer was being written: follow it again from the start.
      conversationId = inflight.conversationId || null;
      current = newTurn(inflight.question || "");
      current.answerId = String(inflight.answerId);
      setBusy(true);
      pending = { type: "resume", answer_id: Number(inflight.answerId), after: 0 };
    } else if (inflight && !inflight.answerId && inflight.question &&
               (inflight.conversationId || null) === (root.dataset.conversationId || null)) {
      // Reloaded before its answer began: not asked (or refused as the page went), so
      // the question is back in the box to ask again, not lost.
      remember(null);
      if (!textarea.value) {
        textarea.value = inflight.question;
        showQuestionHint();
      }
      status.textContent = "The page was left before your question was answered: it is back in the box.";
    }
  }

  // An answer's own page while it is still being written (a second tab): watch it live.
  function setupWatch(root) {
    var view = turnView(root, root.querySelector("[data-turn]"));
    var status = root.querySelector("[data-watch-status]");
    var done = false;
    view.streaming();
    var socket = answerSocket({
      onSignedOut: function () {
        if (!done) return true; // to follow the rest, log in again
        sayLogInAgain(status);
        return false;
      },
      onOpen: function () {
        if (done) return;
        status.textContent = "Being written…";
        socket.send({ type: "resume", answer_id: Number(view.answerId), after: view.seq });
      },
      onLost: function () {
        if (!done && !/Trying again/.test(status.textContent)) status.textContent = "Reconnecting…";
      },
      onMessage: function (message) {
        if (done) return;
        if (isUnavailable(message)) {
          status.textContent = message.message + " Trying again…";
          socket.refused();
          return;
        }
        if (message.type === "error" && message.code === "signed_out") return; // 4401 next
        if (message.type === "error" && typeof message.seq !== "number" && message.code) {
          view.finish("error", message.message);
          done = true;
          return;
        }
        if (view.apply(message)) {
          done = true;
          status.textContent = message.type === "done" ? "Status: " + (STATUS_LABELS[message.status] || message.status) : "";
        }
      },
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    setupCopy();
    setupPreviews();
    var root = document.querySelector("[data-ask]");
    if (root) {
      setupAsk(root);
      root.dataset.ready = "1"; // handlers bound: what tests and scripts can wait for
    }
    var readonly = document.querySelector("[data-ask-readonly]");
    if (readonly && readonly.hasAttribute("data-watch")) setupWatch(readonly);
    else if (readonly) setupReadonly(readonly);
  });
})();
