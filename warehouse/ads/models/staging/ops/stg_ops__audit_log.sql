with

source as (

    select * from {{ lake_source('ops', 'audit_log') }}

),

renamed as (

    select

        ----------  strings
        table_name,
        "partition" as partition_name,
        status,
        rules_failed,
        message,

        ----------  numerics
        delta_version,
        rows_in,
        rows_published,
        rows_rejected,
        duration_ms,

        ----------  timestamps
        started_at,
        started_at + to_microseconds(cast(round(duration_ms * 1000) as bigint)) as finished_at,
        -- Each day a write names (event_date = 'YYYY-MM-DD', event_date = … for a write of several
        -- days): one row per day, so a day's writes are all on its rows; null for a write of no day.
        cast(unnest(coalesce(nullif(event_dates, []), [null])) as date) as event_date

    from (
        select
            *,
            regexp_extract_all("partition", 'event_date = ''(\d{4}-\d{2}-\d{2})''', 1) as event_dates
        from source
    )

)

select * from renamed
