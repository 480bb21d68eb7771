// Server-sent events over fetch: yields each event's `data` payload (a string) as it arrives.
// fetch + ReadableStream rather than EventSource, because the requests are POSTs with a JSON body
// and an Authorization header. Events are separated by a blank line; `data:` lines are joined by "\n".

export async function* sseData(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, "\n");
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = event.split("\n").filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).replace(/^ /, "")).join("\n");
        if (data) yield data;
      }
    }
  } finally {
    reader.releaseLock();
  }
}
