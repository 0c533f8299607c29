// Baton's OpenCode plugin, written by `baton setup opencode` (edits are overwritten by it).
//
// It records each OpenCode session in Baton, as Claude Code's hooks do: the session's start
// and end, each prompt and each tool call, sent to Baton's agentmemory-compatible routes.
// At a session's start Baton answers with "where were we" (the last session in this folder),
// which is added to the system prompt of that session's model calls. Baton being down never
// stops OpenCode: a call that fails is dropped after 5 seconds.

import { readFileSync } from "node:fs";
import { basename } from "node:path";

const SETUP = __BATON_SETUP__; // where `baton setup` found Baton: {url, tokenFile, agent}
const BATON_URL = (process.env.BATON_URL || SETUP.url).replace(/\/+$/, "");
const OUTPUT_KEPT = 4000; // characters of a tool's output sent with it

function token() {
  if (process.env.BATON_TOKEN) return process.env.BATON_TOKEN.trim();
  const file = process.env.BATON_TOKEN_FILE || SETUP.tokenFile;
  if (!file) return "";
  try {
    return readFileSync(file, "utf8").split("\n")[0].trim();
  } catch {
    return "";
  }
}

function headers() {
  const secret = token();
  // With a token Baton knows the agent from it; without (open mode), the header names it.
  return secret
    ? { "Content-Type": "application/json", Authorization: `Bearer ${secret}` }
    : { "Content-Type": "application/json", "X-Baton-Agent": SETUP.agent };
}

async function send(path, body) {
  try {
    const answer = await fetch(`${BATON_URL}/agentmemory${path}`, {
      method: "POST",
      headers: headers(),
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(5000),
    });
    return answer.ok ? await answer.json() : null;
  } catch {
    return null;
  }
}

export const BatonPlugin = async ({ directory, worktree }) => {
  const folder = worktree || directory || process.cwd();
  const remembered = new Map(); // session id -> its "where were we", for its system prompt

  function where(sessionID) {
    return { sessionId: sessionID, project: basename(folder) || folder, cwd: folder };
  }

  function observe(sessionID, hookType, data) {
    if (!sessionID) return Promise.resolve(null);
    const event = { ...where(sessionID), hookType, timestamp: new Date().toISOString(), data };
    return send("/observe", event);
  }

  return {
    event: async ({ event }) => {
      const properties = event.properties || {};
      if (event.type === "session.created" && properties.info?.id) {
        const info = properties.info;
        const started = await send("/session/start", {
          ...where(info.id),
          cwd: info.directory || folder,
          title: info.title || undefined,
        });
        if (typeof started?.context === "string" && started.context) {
          remembered.set(info.id, started.context);
        }
      } else if (event.type === "session.idle") {
        await observe(properties.sessionID, "stop", {});
      } else if (event.type === "session.deleted" && properties.info?.id) {
        remembered.delete(properties.info.id);
        await send("/session/end", { sessionId: properties.info.id });
      }
    },

    "chat.message": async (input, output) => {
      const prompt = (output.parts || [])
        .filter((part) => part.type === "text" && !part.synthetic && part.text)
        .map((part) => part.text)
        .join("\n");
      if (prompt) await observe(input.sessionID, "prompt_submit", { prompt });
    },

    "tool.execute.after": async (input, output) => {
      await observe(input.sessionID, "post_tool_use", {
        tool_name: input.tool,
        tool_input: input.args ?? {},
        tool_output: String(output?.output ?? "").slice(0, OUTPUT_KEPT),
      });
    },

    "experimental.chat.system.transform": async (input, output) => {
      const context = remembered.get(input.sessionID);
      if (context && Array.isArray(output.system)) output.system.push(context);
    },
  };
};
