"""An example command agent for examples/daily_article_draft.toml.

watchkeeper runs it with the task context as JSON on stdin. It writes one markdown
draft into the promised directory (``artifact_dir``) and prints a JSON result with
the report and the artifact's path; watchkeeper verifies the file before the
occurrence counts as completed.
"""

import json
import sys
from pathlib import Path

context = json.load(sys.stdin)
occurrence = context["occurrence"]
directory = Path(context["artifact_dir"])
draft = directory / f"draft-{occurrence['scheduled_for'][:10]}.md"
draft.write_text(
    f"# Draft for {occurrence['scheduled_for'][:10]}\n\n{context['instructions']}\n"
    + ("\n(This draft was produced late; it belongs to the slot above.)\n" if occurrence["late"] else "")
)
print(json.dumps({"report": f"# Draft written\n\n{draft.name}\n", "artifact": str(draft)}))
