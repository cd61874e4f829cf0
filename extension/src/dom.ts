/**
 * Small DOM helpers for views that update in place instead of redrawing.
 */

const SVG_NS = 'http://www.w3.org/2000/svg';

/** An HTML element with a class and optional text. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className: string,
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  node.className = className;
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** An SVG element with a class. */
export function svg<K extends keyof SVGElementTagNameMap>(
  tag: K,
  className: string
): SVGElementTagNameMap[K] {
  const node = document.createElementNS(SVG_NS, tag);
  node.setAttribute('class', className);
  return node;
}

/** Set text only when it differs: keeps selections and avoids layout work. */
export function setText(node: Element, text: string): void {
  if (node.textContent !== text) {
    node.textContent = text;
  }
}

/**
 * Make *parent*'s children one element per item, in order, keyed by `data-key`:
 * existing elements are kept and updated, new ones created, stale ones removed.
 */
export function syncChildren<T, E extends Element>(
  parent: Element,
  items: readonly T[],
  key: (item: T) => string,
  create: (item: T) => E,
  update: (node: E, item: T) => void
): void {
  const existing = new Map<string, E>();
  for (const child of Array.from(parent.children)) {
    const k = child.getAttribute('data-key');
    if (k !== null) {
      existing.set(k, child as E);
    }
  }
  items.forEach((item, index) => {
    const k = key(item);
    let node = existing.get(k);
    if (node === undefined) {
      node = create(item);
      node.setAttribute('data-key', k);
    } else {
      existing.delete(k);
    }
    update(node, item);
    if (parent.children[index] !== node) {
      parent.insertBefore(node, parent.children[index] ?? null);
    }
  });
  for (const stale of existing.values()) {
    stale.remove();
  }
}
