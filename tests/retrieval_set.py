"""A labelled retrieval set for make bench: what coding agents save across sessions, and
what they later ask.

Three projects (a web shop's backend, its infrastructure, its mobile app) and memories of
no project (shared: a developer's preferences). Each project holds things named like
things in another (a ``refund.py`` in two, a macOS runner in two, a cache in each), so a
search scoped to one project that returns another's memory is contamination. Queries are
written as an agent asks: exact words, file paths, error strings, versions and dates,
Chinese and Japanese, and paraphrases that share no word with the memory they want.
"""

from __future__ import annotations

from typing import NamedTuple


class Memory(NamedTuple):
    key: str
    project: str | None
    content: str


class Query(NamedTuple):
    text: str
    project: str | None  # searched within this project (and shared memories)
    relevant: tuple[str, ...]  # keys of the memories that answer it
    kind: str  # words | path | error | version | date | cjk | paraphrase


MEMORIES = [
    # -- shop: the web shop's backend ------------------------------------------------------
    Memory(
        "shop-refund-handler",
        "shop",
        "The refund handler lives in src/payments/refund.py; it calls Stripe's refunds API and writes a ledger entry in the same transaction.",
    ),
    Memory(
        "shop-refund-keyerror",
        "shop",
        "Fixed KeyError: 'user_id' in src/payments/refund.py when a guest checkout is refunded: guests have no user_id, use the order's email instead.",
    ),
    Memory(
        "shop-refund-partial",
        "shop",
        "Partial refunds are capped at the captured amount minus earlier refunds; the check is in payments/limits.py.",
    ),
    Memory(
        "shop-cache-redis",
        "shop",
        "Product pages are cached in Redis for 10 minutes; invalidate with cache.bust(product_id) after a price change.",
    ),
    Memory(
        "shop-cache-stampede",
        "shop",
        "Cache stampede on the homepage after a deploy: added a lock around the recompute in src/cache/homepage.py.",
    ),
    Memory(
        "shop-auth-jwt",
        "shop",
        "Access tokens are JWTs signed with RS256; keys rotate every 30 days via the jwks endpoint.",
    ),
    Memory(
        "shop-auth-refresh",
        "shop",
        "Refresh tokens are stored hashed in Postgres, one per device, and revoked on password change.",
    ),
    Memory(
        "shop-db-migrations",
        "shop",
        "Run migrations with alembic upgrade head; never edit a migration that already ran in production.",
    ),
    Memory(
        "shop-db-index",
        "shop",
        "The orders table needs the index on (customer_id, created_at) or the account page takes seconds.",
    ),
    Memory(
        "shop-econnrefused",
        "shop",
        "Error: connect ECONNREFUSED 127.0.0.1:6379 in the test suite means Redis is not running; start it with docker compose up redis.",
    ),
    Memory(
        "shop-email-queue",
        "shop",
        "Order confirmation emails go through the RQ queue 'mail'; a stuck job usually means the SMTP password expired.",
    ),
    Memory(
        "shop-pytest-parallel",
        "shop",
        "The test suite takes 11 minutes serially; pytest -n auto with pytest-xdist brings it to 3 minutes.",
    ),
    Memory(
        "shop-price-rounding",
        "shop",
        "Prices are stored as integer cents; rounding happens once, at display time, with banker's rounding.",
    ),
    Memory(
        "shop-stripe-webhook",
        "shop",
        "Stripe webhooks must be verified with the signing secret; the endpoint is /webhooks/stripe and it must answer within 10 seconds.",
    ),
    Memory(
        "shop-tax-2026",
        "shop",
        "From 2026-01-01 the EU VAT rate for digital goods is taken from the vat_rates table, updated by the nightly job.",
    ),
    Memory(
        "shop-release-2026-04-08",
        "shop",
        "Release 2026-04-08 rolled back: the checkout page broke on Safari because of an optional chaining polyfill.",
    ),
    Memory(
        "shop-python-312",
        "shop",
        "The backend moved to Python 3.12 on 2026-03-15; asyncio.TaskGroup replaced the old gather helper.",
    ),
    Memory(
        "shop-n-plus-one",
        "shop",
        "The admin order list did one query per line item; select_related('customer') fixed the N+1.",
    ),
    Memory(
        "shop-search-es",
        "shop",
        "Product search uses Elasticsearch 8.11; the synonyms file is config/search/synonyms.txt.",
    ),
    Memory(
        "shop-getUserName",
        "shop",
        "getUserName() in src/accounts/profile.py returns the display name, falling back to the email's local part.",
    ),
    Memory(
        "shop-cn-cache", "shop", "商品详情页的缓存失效时间是十分钟，价格变更后需要手动清除缓存。"
    ),
    Memory(
        "shop-cn-refund",
        "shop",
        "退款接口在访客结账时会报错，因为访客没有用户编号，已改用订单邮箱。",
    ),
    Memory("shop-ja-deploy", "shop", "本番環境へのデプロイは金曜日の午後には行わないこと。"),
    # -- infra: CI, runners, images, cloud -------------------------------------------------
    Memory(
        "infra-runner-macos",
        "infra",
        "The macos-22 runner image was retired; jobs that need Xcode now run on macos-14 runners.",
    ),
    Memory(
        "infra-buildx-arm64",
        "infra",
        "Docker images are built for linux/amd64 and linux/arm64 with docker buildx and pushed as one manifest.",
    ),
    Memory(
        "infra-terraform-state",
        "infra",
        "Terraform state lives in the S3 bucket tf-state-prod with DynamoDB locking; never run terraform apply from a laptop.",
    ),
    Memory(
        "infra-deploy-branch",
        "infra",
        "Production deploys go out from the release branch after the staging smoke tests pass; main deploys to staging.",
    ),
    Memory(
        "infra-deploy-friday",
        "infra",
        "No production deploys on Friday afternoons; hotfixes need two approvals.",
    ),
    Memory(
        "infra-k8s-oom",
        "infra",
        "The worker pods were OOMKilled at 512Mi; raised the memory limit to 1Gi and set requests to 768Mi.",
    ),
    Memory(
        "infra-node-20",
        "infra",
        "CI moved to Node 20 on 2026-02-01 because Node 18 reached end of life.",
    ),
    Memory(
        "infra-cache-actions",
        "infra",
        "The GitHub Actions cache key includes the lockfile hash; a stale cache after a dependency bump means the key missed the lockfile.",
    ),
    Memory(
        "infra-secrets",
        "infra",
        "Secrets come from AWS Secrets Manager at startup; the CI role can read only the ci/* prefix.",
    ),
    Memory(
        "infra-cert-expiry",
        "infra",
        "The TLS certificate for api.shop.example expired on 2026-05-30 because the cert-manager ClusterIssuer had the staging ACME URL.",
    ),
    Memory(
        "infra-dns-ttl",
        "infra",
        "DNS records for the API have a 60 second TTL so a failover takes effect within a minute.",
    ),
    Memory(
        "infra-postgres-15",
        "infra",
        "The production database is Postgres 15.4 on RDS; the upgrade to 16 is planned after the summer sale.",
    ),
    Memory(
        "infra-log-retention",
        "infra",
        "Application logs are kept 30 days in Loki; audit logs 1 year in S3 Glacier.",
    ),
    Memory(
        "infra-runner-disk",
        "infra",
        "Self-hosted runners ran out of disk: docker system prune runs nightly now, and the runners have 200 GB volumes.",
    ),
    Memory(
        "infra-helm-values",
        "infra",
        "Per-environment settings live in deploy/helm/values-prod.yaml and values-staging.yaml; never hard-code them in the chart.",
    ),
    Memory(
        "infra-refund-py",
        "infra",
        "scripts/ops/refund.py replays failed refunds from the dead-letter queue; run it with --dry-run first.",
    ),
    Memory("infra-cn-runner", "infra", "构建机磁盘满了，现在每晚清理一次镜像。"),
    Memory("infra-ja-cert", "infra", "証明書の期限切れは発行者の設定ミスが原因でした。"),
    # -- mobile: the iOS and Android app ----------------------------------------------------
    Memory(
        "mobile-refund-screen",
        "mobile",
        "The refund request screen is features/refund/RefundScreen.tsx; it posts to the shop API and shows the refund status.",
    ),
    Memory(
        "mobile-refund-py",
        "mobile",
        "mobile/tools/refund.py generates fake refund fixtures for the screenshot tests.",
    ),
    Memory(
        "mobile-image-cache",
        "mobile",
        "Images are cached on disk with a 100 MB LRU limit; clearing the cache is in Settings > Storage.",
    ),
    Memory(
        "mobile-macos-runner",
        "mobile",
        "iOS builds need a macos-14 runner with Xcode 15.3; the macos-22 label no longer exists.",
    ),
    Memory(
        "mobile-crash-launch",
        "mobile",
        "The app crashed on launch on Android 14 when notification permission was denied: the push setup assumed a token.",
    ),
    Memory(
        "mobile-hermes",
        "mobile",
        "React Native 0.74 with the Hermes engine; enabling the new architecture broke the maps module.",
    ),
    Memory(
        "mobile-deep-links",
        "mobile",
        "Deep links use the scheme shop:// and universal links on app.shop.example; the apple-app-site-association file is served by the API.",
    ),
    Memory(
        "mobile-store-review",
        "mobile",
        "App Store review rejected version 4.2.0 because the account deletion flow was missing.",
    ),
    Memory(
        "mobile-offline",
        "mobile",
        "Offline mode queues cart changes in SQLite and replays them when the connection comes back.",
    ),
    Memory(
        "mobile-keyerror",
        "mobile",
        "KeyError: 'price' in the fixture generator means the product fixture is from before the cents migration.",
    ),
    Memory(
        "mobile-auth-biometric",
        "mobile",
        "Biometric login keeps the refresh token in the Keychain (iOS) and the Keystore (Android), never in AsyncStorage.",
    ),
    Memory(
        "mobile-release-train",
        "mobile",
        "Mobile releases ship every second Tuesday; the cut-off for the release train is Monday noon.",
    ),
    Memory(
        "mobile-ja-crash",
        "mobile",
        "アプリ起動時のクラッシュは通知の許可が拒否された場合に発生していた。",
    ),
    # -- shared: the developer's own preferences --------------------------------------------
    Memory("shared-pnpm", None, "Use pnpm, never npm or yarn, in every JavaScript workspace."),
    Memory(
        "shared-commits",
        None,
        "Commit messages follow Conventional Commits: feat:, fix:, chore: and a short imperative subject.",
    ),
    Memory(
        "shared-tabs",
        None,
        "Format Python with ruff format and TypeScript with prettier; no manual alignment.",
    ),
    Memory(
        "shared-review",
        None,
        "Ask for review from someone outside the team for changes to payments or auth.",
    ),
]

QUERIES = [
    # plain words
    Query("where is the refund handler", "shop", ("shop-refund-handler",), "words"),
    Query("partial refund limit", "shop", ("shop-refund-partial",), "words"),
    Query(
        "invalidate product page cache after price change", "shop", ("shop-cache-redis",), "words"
    ),
    Query("which package manager should I use for javascript", "infra", ("shared-pnpm",), "words"),
    Query("terraform state bucket", "infra", ("infra-terraform-state",), "words"),
    Query("worker pods killed for memory", "infra", ("infra-k8s-oom",), "words"),
    Query("app store rejection", "mobile", ("mobile-store-review",), "words"),
    Query("offline cart changes", "mobile", ("mobile-offline",), "words"),
    Query("stripe webhook timeout", "shop", ("shop-stripe-webhook",), "words"),
    Query("refresh token storage", "mobile", ("mobile-auth-biometric",), "words"),
    Query("commit message format", "shop", ("shared-commits",), "words"),
    # file paths and identifiers
    Query("refund.py", "shop", ("shop-refund-handler", "shop-refund-keyerror"), "path"),
    Query("payments/refund.py", "shop", ("shop-refund-handler", "shop-refund-keyerror"), "path"),
    Query("refund.py", "infra", ("infra-refund-py",), "path"),
    Query("refund.py", "mobile", ("mobile-refund-py",), "path"),
    Query("RefundScreen", "mobile", ("mobile-refund-screen",), "path"),
    Query("homepage.py", "shop", ("shop-cache-stampede",), "path"),
    Query("values-prod.yaml", "infra", ("infra-helm-values",), "path"),
    Query("getUserName", "shop", ("shop-getUserName",), "path"),
    Query("user name display fallback", "shop", ("shop-getUserName",), "path"),
    Query("synonyms.txt", "shop", ("shop-search-es",), "path"),
    # error strings
    Query("KeyError: 'user_id'", "shop", ("shop-refund-keyerror",), "error"),
    Query("KeyError price", "mobile", ("mobile-keyerror",), "error"),
    Query("ECONNREFUSED 6379", "shop", ("shop-econnrefused",), "error"),
    Query("OOMKilled", "infra", ("infra-k8s-oom",), "error"),
    Query("N+1 query", "shop", ("shop-n-plus-one",), "error"),
    # versions and dates
    Query("macos-22", "infra", ("infra-runner-macos",), "version"),
    Query("macos runner", "mobile", ("mobile-macos-runner",), "version"),
    Query("node 20", "infra", ("infra-node-20",), "version"),
    Query("postgres 16 upgrade", "infra", ("infra-postgres-15",), "version"),
    Query("python 3.12", "shop", ("shop-python-312",), "version"),
    Query("React Native 0.74", "mobile", ("mobile-hermes",), "version"),
    Query("4.2.0", "mobile", ("mobile-store-review",), "version"),
    Query("2026-04-08", "shop", ("shop-release-2026-04-08",), "date"),
    Query("what broke in the april 2026 release", "shop", ("shop-release-2026-04-08",), "date"),
    Query("2026-05-30", "infra", ("infra-cert-expiry",), "date"),
    Query(
        "what changed in 2026",
        "shop",
        ("shop-tax-2026", "shop-python-312", "shop-release-2026-04-08"),
        "date",
    ),
    # Chinese and Japanese
    Query("缓存", "shop", ("shop-cn-cache",), "cjk"),
    Query("退款报错", "shop", ("shop-cn-refund",), "cjk"),
    Query("デプロイ", "shop", ("shop-ja-deploy",), "cjk"),
    Query("磁盘", "infra", ("infra-cn-runner",), "cjk"),
    Query("証明書", "infra", ("infra-ja-cert",), "cjk"),
    Query("クラッシュ", "mobile", ("mobile-ja-crash",), "cjk"),
    # paraphrases: no word shared with the memory wanted
    Query("multi-arch container images", "infra", ("infra-buildx-arm64",), "paraphrase"),
    Query("how do we ship to prod", "infra", ("infra-deploy-branch",), "paraphrase"),
    Query("app dies at startup", "mobile", ("mobile-crash-launch",), "paraphrase"),
    Query("speed up slow tests", "shop", ("shop-pytest-parallel",), "paraphrase"),
    Query("money amounts precision", "shop", ("shop-price-rounding",), "paraphrase"),
    Query("login with fingerprint", "mobile", ("mobile-auth-biometric",), "paraphrase"),
    Query("build machines full storage", "infra", ("infra-runner-disk",), "paraphrase"),
    Query("when do phone app versions go out", "mobile", ("mobile-release-train",), "paraphrase"),
    Query("customer purchase lookup is slow", "shop", ("shop-db-index",), "paraphrase"),
]

# Queries about nothing the agents saved: every result they get is noise.
UNRELATED = [
    Query("banana smoothie recipe", "shop", (), "unrelated"),
    Query("the weather in paris tomorrow", "infra", (), "unrelated"),
    Query("my cat sleeps all day", "mobile", (), "unrelated"),
    Query("who won the football world cup", "shop", (), "unrelated"),
]
