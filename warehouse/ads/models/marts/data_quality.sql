with

audit_log as (

    select * from {{ ref('stg_ops__audit_log') }}
    where {{ in_build_days('event_date') }}

),

books as (

    select * from {{ ref('stg_ops__books') }}
    where {{ in_build_days('event_date') }}

),

quarantined_rows as (

    select * from {{ ref('stg_dwd__quarantined_rows') }}
    where {{ in_build_days('event_date') }}

),

freshness_slas as (

    {{ freshness_slas() }}

),

partition_attempts as (

    select
        event_date,
        table_name,
        partition_name,
        count(*) as attempts,
        count(*) filter (where status = 'failed') as failed_attempts,
        arg_max(status, started_at) as status,
        arg_max(delta_version, started_at) filter (where status = 'published') as delta_version,
        arg_max(rows_in, started_at) as rows_in,
        arg_max(rows_published, started_at) as rows_published,
        arg_max(rows_rejected, started_at) as rows_rejected,
        arg_max(rules_failed, started_at) as rules_failed,
        arg_max(message, started_at) as message,
        min(finished_at) filter (where status = 'published') as first_published_at,
        max(finished_at) filter (where status = 'published') as last_published_at,
        -- Only the day's own partition carries the day's books and quarantine: a late-label
        -- rewrite of several days at once (event_date = 'D', event_date = 'D+1') is a row of its own.
        partition_name = 'event_date = ''' || strftime(event_date, '%Y-%m-%d') || '''' as is_day_partition

    from audit_log
    group by event_date, table_name, partition_name

),

rule_counts as (

    select
        event_date,
        target_table,
        rule,
        count(*) as quarantined

    from (select event_date, target_table, unnest(rules) as rule from quarantined_rows)
    group by event_date, target_table, rule

),

quarantine_by_table as (

    select
        event_date,
        target_table,
        list(rule order by quarantined desc, rule) as quarantine_rules,
        list(quarantined order by quarantined desc, rule) as quarantine_rule_counts

    from rule_counts
    group by event_date, target_table

),

final as (

    select
        partition_attempts.event_date,
        partition_attempts.table_name,
        partition_attempts.partition_name as partition,
        partition_attempts.attempts,
        partition_attempts.failed_attempts,
        partition_attempts.status,
        partition_attempts.delta_version,
        partition_attempts.rows_in,
        partition_attempts.rows_published,
        partition_attempts.rows_rejected,
        partition_attempts.rules_failed,
        partition_attempts.message,
        partition_attempts.first_published_at,
        partition_attempts.last_published_at,
        books.ods_rows,
        books.duplicates,
        books.quarantined,
        books.malformed,
        books.is_balanced as books_balanced,
        case when books.table_name is not null
            then coalesce(quarantine_by_table.quarantine_rules, []) end as quarantine_rules,
        case when books.table_name is not null
            then coalesce(quarantine_by_table.quarantine_rule_counts, []) end as quarantine_rule_counts,
        freshness_slas.sla_hours as freshness_sla_hours,
        (epoch(partition_attempts.first_published_at) - epoch(cast(partition_attempts.event_date as timestamp)))
            / 3600 as publish_lag_hours,
        (epoch(partition_attempts.first_published_at) - epoch(cast(partition_attempts.event_date as timestamp)))
            / 3600 <= freshness_slas.sla_hours as is_fresh

    from partition_attempts
    left join books
        on partition_attempts.is_day_partition
        and partition_attempts.event_date = books.event_date
        and partition_attempts.table_name = books.table_name
    left join quarantine_by_table
        on partition_attempts.is_day_partition
        and partition_attempts.event_date = quarantine_by_table.event_date
        and partition_attempts.table_name = quarantine_by_table.target_table
    left join freshness_slas
        on partition_attempts.table_name = freshness_slas.table_name

)

select * from final
