// Cited Answers: the ask page's client. No build step, no dependencies.
// Streamed tokens are appended as text, never as markup. Only HTML the server rendered
// and sanitized (the final answer and the Sources panels) is inserted as HTML.
(function () {
  "use strict";

  function csrfToken(root) {
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
        body: JSON.stringify({ rating: rating, comment: comment }),
      })
        .then(function (response) {
          status.textContent = response.ok ? "Thanks for your feedback." : "Feedback could not be saved.";
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

  function setupAsk(root) {
    var form = root.querySelector("[data-ask-form]");
    var textarea = form.querySelector("textarea");
    var askButton = root.querySelector("[data-ask-button]");
    var stopButton = root.querySelector("[data-stop-button]");
    var newButton = root.querySelector("[data-new-conversation]");
    var status = root.querySelector("[data-ask-status]");
    var turns = root.querySelector("[data-turns]");
    var template = root.querySelector("[data-turn-template]");
    var conversationId = null;
    var current = null;
    var socket = null;
    var pending = null;

    function setBusy(busy) {
      askButton.disabled = busy;
      stopButton.disabled = !busy;
    }

    function connect() {
      var scheme = window.location.protocol === "https:" ? "wss://" : "ws://";
      socket = new WebSocket(scheme + window.location.host + "/ws/answers/");
      socket.addEventListener("open", function () {
        status.textContent = "";
        if (pending) {
          socket.send(JSON.stringify(pending));
          pending = null;
        }
      });
      socket.addEventListener("message", function (event) {
        handle(JSON.parse(event.data));
      });
      socket.addEventListener("close", function (event) {
        if (event.code === 4401) {
          window.location.href = "/accounts/login/?next=" + encodeURIComponent(window.location.pathname);
          return;
        }
        if (current) finish("error", "The connection was lost. Please ask again.");
        status.textContent = "Reconnecting…";
        window.setTimeout(connect, 1500);
      });
    }

    function newTurn(question) {
      var fragment = template.content.cloneNode(true);
      var turn = fragment.querySelector("[data-turn]");
      turn.querySelector(".turn-question").textContent = question;
      turns.appendChild(fragment);
      var added = turns.lastElementChild;
      var answer = added.querySelector("[data-answer]");
      answer.setAttribute("aria-busy", "true");
      return { turn: added, answer: answer, slot: added.querySelector("[data-sources-slot]") };
    }

    function finish(state, message) {
      if (!current) return;
      current.answer.dataset.answerState = state;
      current.answer.setAttribute("aria-busy", "false");
      if (message) {
        var p = document.createElement("p");
        p.className = "error";
        p.setAttribute("role", "alert");
        p.textContent = message;
        current.answer.appendChild(p);
      }
      current = null;
      setBusy(false);
      textarea.focus();
    }

    function handle(message) {
      if (message.type === "error" && !current) {
        status.textContent = message.message;
        return;
      }
      if (!current) return;
      switch (message.type) {
        case "references":
          conversationId = message.conversation_id;
          current.turn.dataset.answerId = message.answer_id;
          current.slot.innerHTML = "";
          current.slot.insertAdjacentHTML("afterbegin", message.sources_html);
          break;
        case "token":
          current.answer.appendChild(document.createTextNode(message.text));
          break;
        case "citation":
          var entry = current.slot.querySelector('[data-number="' + Number(message.number) + '"]');
          if (entry) entry.classList.add("cited");
          break;
        case "done":
          current.answer.innerHTML = message.html;
          var panel = current.slot.querySelector("[data-sources-panel]");
          if (panel) replaceWithHtml(panel, message.sources_html);
          else current.slot.insertAdjacentHTML("afterbegin", message.sources_html);
          current.turn.querySelector("[data-feedback]").hidden = false;
          setupFeedback(root, current.turn);
          finish("done");
          break;
        case "error":
          finish("error", message.message);
          break;
      }
    }

    form.addEventListener("submit", function (event) {
      event.preventDefault();
      var question = textarea.value.trim();
      if (!question || current) return;
      current = newTurn(question);
      setBusy(true);
      textarea.value = "";
      var message = { type: "ask", question: question, conversation_id: conversationId };
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify(message));
      else pending = message;
    });
    textarea.addEventListener("keydown", function (event) {
      if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    stopButton.addEventListener("click", function () {
      if (socket && socket.readyState === WebSocket.OPEN) socket.send(JSON.stringify({ type: "stop" }));
    });
    newButton.addEventListener("click", function () {
      conversationId = null;
      turns.innerHTML = "";
      textarea.focus();
    });
    connect();
  }

  document.addEventListener("DOMContentLoaded", function () {
    var root = document.querySelector("[data-ask]");
    if (root) setupAsk(root);
    var readonly = document.querySelector("[data-ask-readonly]");
    if (readonly) setupReadonly(readonly);
  });
})();
