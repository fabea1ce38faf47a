-- Handler builds kept in the shared database, so one deploy reaches every host
-- (host/src/store/deployments.rs, docs/operations.md "Deploying to many hosts"). The tables are
-- those of the PostgreSQL migration 0014; hosts poll spool_deployment's revisions.
-- IF NOT EXISTS: safe to run again (MySQL DDL is not transactional).
--
-- Chunks of at most 1 MiB: MariaDB's default max_allowed_packet is 16 MiB, and a Python
-- component is larger.
CREATE TABLE IF NOT EXISTS spool_build (
    digest     VARCHAR(64) NOT NULL,
    chunk      INT         NOT NULL,
    bytes      MEDIUMBLOB  NOT NULL,
    created_at BIGINT      NOT NULL,
    PRIMARY KEY (digest, chunk)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS spool_version (
    task_type   VARCHAR(64)  NOT NULL,
    number      BIGINT       NOT NULL,
    digest      VARCHAR(64)  NOT NULL,
    size        BIGINT       NOT NULL,
    manifest    MEDIUMTEXT,
    deployed_at BIGINT       NOT NULL,
    deployed_by VARCHAR(64)  NOT NULL,
    origin      VARCHAR(255),
    PRIMARY KEY (task_type, number)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS spool_deployment (
    task_type         VARCHAR(64) NOT NULL,
    last_version      BIGINT      NOT NULL DEFAULT 0,
    stable_version    BIGINT,
    candidate_version BIGINT,
    canary_percent    INT         NOT NULL DEFAULT 0,
    canary_since      BIGINT,
    revision          BIGINT      NOT NULL DEFAULT 0,
    change_id         VARCHAR(64) NOT NULL DEFAULT '',
    updated_at        BIGINT      NOT NULL DEFAULT 0,
    PRIMARY KEY (task_type)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS spool_deploy_event (
    id        BIGINT      NOT NULL AUTO_INCREMENT,
    task_type VARCHAR(64) NOT NULL,
    at        BIGINT      NOT NULL,
    action    VARCHAR(16) NOT NULL,
    version   BIGINT,
    actor     VARCHAR(64) NOT NULL,
    origin    VARCHAR(255),
    detail    TEXT,
    PRIMARY KEY (id),
    KEY spool_deploy_event_by_type (task_type, id)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS spool_build_tally (
    task_type     VARCHAR(64)  NOT NULL,
    digest        VARCHAR(64)  NOT NULL,
    host_id       VARCHAR(191) NOT NULL,
    window_ms     BIGINT       NOT NULL,
    attempts      BIGINT       NOT NULL,
    failures      BIGINT       NOT NULL,
    wall_ms_total BIGINT       NOT NULL,
    wall_buckets  TEXT         NOT NULL,
    fuel_total    BIGINT       NOT NULL,
    fuel_attempts BIGINT       NOT NULL,
    memory_peak   BIGINT       NOT NULL,
    updated_at    BIGINT       NOT NULL,
    PRIMARY KEY (task_type, digest, host_id, window_ms)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;

CREATE TABLE IF NOT EXISTS spool_artifact (
    name       VARCHAR(191) NOT NULL,
    digest     VARCHAR(64)  NOT NULL,
    chunk      INT          NOT NULL,
    bytes      MEDIUMBLOB   NOT NULL,
    created_at BIGINT       NOT NULL,
    PRIMARY KEY (name, chunk)
) ENGINE = InnoDB DEFAULT CHARSET = utf8mb4 COLLATE = utf8mb4_bin;
