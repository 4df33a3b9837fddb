"""Small fixes to the HTML pages, each one found by ``tools/check_pages.py`` in a real browser.

* **A JavaScript error on every page**: Sphinx 7.4 keeps two copies of an inline script when one extension
  adds it before the HTML builder exists (registered with filename ``''``) and again after (``None``);
  sphinx-thebe's ``const THEBE_JS_URL = ...`` then throws "Identifier 'THEBE_JS_URL' has already been
  declared" (sphinx-togglebutton's selector is duplicated the same way, harmlessly). The pages keep the
  first copy of each identical script.
"""
from __future__ import annotations


def _key(js) -> tuple:
    attrs = tuple(sorted((k, str(v)) for k, v in js.attributes.items()))
    return (js.filename or "", attrs)


def _dedupe_scripts(app, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not isinstance(scripts, list):
        return
    seen: set = set()
    kept = []
    for js in scripts:
        key = _key(js) if hasattr(js, "attributes") else ("str", str(js))
        if key not in seen:
            seen.add(key)
            kept.append(js)
    scripts[:] = kept


def setup(app):
    app.connect("html-page-context", _dedupe_scripts, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
