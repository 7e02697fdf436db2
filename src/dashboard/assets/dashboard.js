// yardmaster dashboard: confirmations before destructive forms, and a job page's live
// progress bar and timeline, read from the job's event stream (text/event-stream over
// fetch, resumed with Last-Event-ID when the connection drops); at the job's end the page's
// content is fetched again and swapped in, never reloaded.
"use strict";

document.addEventListener("submit", (event) => {
  const form = event.target.closest("form[data-confirm]");
  if (form && !window.confirm(form.dataset.confirm)) event.preventDefault();
});

(function followJob() {
  const timeline = document.getElementById("timeline");
  if (!timeline || timeline.dataset.ended === "true") return;
  const progress = document.getElementById("progress");
  const status = document.getElementById("status");
  const ends = new Set(["job.succeeded", "job.failed", "job.cancelled"]);
  const url = new URL(timeline.dataset.stream, window.location.href);
  let last = url.searchParams.get("after");
  url.searchParams.delete("after");
  let ended = false;

  function showProgress(current, total) {
    if (!progress) return;
    const bar = progress.querySelector("progress");
    const count = progress.querySelector(".count");
    if (total !== undefined && total !== null) {
      progress.dataset.total = total;
      bar.max = Math.max(total, 1);
    }
    progress.dataset.current = current;
    bar.value = current;
    const max = Number(progress.dataset.total);
    count.textContent = max > 0 ? `${current}/${max} (${Math.floor((Math.min(current, max) * 100) / max)}%)` : `${current}`;
  }

  function showStatus(name) {
    const next = { "job.started": "running", "job.succeeded": "succeeded", "job.failed": "failed",
      "job.cancelled": "cancelled", "job.queued": "queued", "job.retry_scheduled": "queued",
      "job.retry_later": "queued", "job.lease_expired_requeue": "queued" }[name];
    if (!next || !status) return;
    status.innerHTML = "";
    const badge = document.createElement("span");
    badge.className = `status ${next}`;
    badge.textContent = next;
    status.appendChild(badge);
  }

  function add(event) {
    const item = document.createElement("li");
    item.className = event.level;
    item.dataset.id = event.id;
    const time = document.createElement("time");
    time.textContent = event.ts.replace("T", " ").slice(0, 19);
    const name = document.createElement("b");
    name.textContent = event.event;
    item.append(time, " ", name, " ", event.message || "");
    if (event.fields && Object.keys(event.fields).length) {
      const fields = document.createElement("code");
      fields.className = "fields";
      fields.textContent = JSON.stringify(event.fields);
      item.append(" ", fields);
    }
    timeline.appendChild(item);
    const fields = event.fields || {};
    if (fields._progress_current !== undefined) showProgress(fields._progress_current, fields._progress_total);
    showStatus(event.event);
    if (ends.has(event.event)) ended = true;
  }

  async function read() {
    const headers = { Accept: "text/event-stream" };
    if (last) headers["Last-Event-ID"] = last;
    const response = await fetch(url, { headers, credentials: "same-origin" });
    if (!response.ok || !response.body) throw new Error(`stream answered ${response.status}`);
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let cut;
      while ((cut = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        let id = null;
        const data = [];
        for (const line of frame.split("\n")) {
          if (line.startsWith(":")) continue;
          const colon = line.indexOf(":");
          const field = colon < 0 ? line : line.slice(0, colon);
          const text = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
          if (field === "id") id = text;
          if (field === "data") data.push(text);
        }
        if (!data.length) continue;
        if (id) last = id;
        add(JSON.parse(data.join("\n")));
      }
    }
  }

  async function follow() {
    let pause = 250;
    while (!ended) {
      try {
        await read();
        pause = 250;
      } catch (error) {
        pause = Math.min(pause * 2, 5000);
      }
      if (!ended) await new Promise((resolve) => setTimeout(resolve, pause));
    }
    timeline.dataset.ended = "true";
    await settle();
  }

  // The result, the error and the buttons of the job's end: the page as the server renders
  // it now, swapped in without a reload (nothing moves under the reader, and a test waits
  // for `main[data-settled]`, not for a timer). Tried until it answers.
  async function settle() {
    const main = document.querySelector("main");
    for (let pause = 250; ; pause = Math.min(pause * 2, 5000)) {
      try {
        const response = await fetch(window.location.href, { credentials: "same-origin" });
        if (response.ok) {
          const fresh = new DOMParser().parseFromString(await response.text(), "text/html").querySelector("main");
          if (fresh) {
            main.replaceChildren(...fresh.childNodes);
            main.dataset.settled = "true";
            return;
          }
        }
      } catch (error) {
        // the server is away for a moment (a redeploy): try again
      }
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  }
  follow();
})();
