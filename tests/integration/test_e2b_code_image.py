"""@e2b/code-interpreter's chart (tests/e2e/e2b_code.test.mjs with
AIRLOCK_E2B_CHART=1) on the bundled default image, which has matplotlib
(the host's runtime has not): a sandbox of template "default" runs its
cells there, and a figure shown or left open comes back as a PNG result."""
from image_util import ensure_default_image, images_state
from node_util import node_test, npm_ci


def test_e2b_chart_on_the_default_image(tmp_path):
    npm_ci()
    ensure_default_image()
    from service_util import Service
    svc = Service(images_state(tmp_path)).start()
    try:
        node_test("e2b_code.test.mjs", {"AIRLOCK_URL": svc.base_url, "AIRLOCK_API_KEY": svc.key,
                                        "AIRLOCK_E2B_CHART": "1"}, expect=1)
    finally:
        svc.stop()
