// What the page's parts share: server facts, the document list, the selection, and change events.

const listeners = new Map();

export const state = {
  /** `GET /v1/info`: limits and whether a key is needed. */
  info: null,
  /** Documents of the current listing, by id. */
  documents: new Map(),
  /** Ids of the documents selected as the question's scope. */
  selected: new Set(),
};

/** Subscribes to a named change ("documents", "selection"). */
export function on(name, fn) {
  if (!listeners.has(name)) listeners.set(name, []);
  listeners.get(name).push(fn);
}

export function emit(name, detail) {
  for (const fn of listeners.get(name) || []) fn(detail);
}
