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
        -- The day a partition holds, read from its name (event_date = 'YYYY-MM-DD' …).
        cast(nullif(regexp_extract("partition", 'event_date = ''(\d{4}-\d{2}-\d{2})''', 1), '') as date) as event_date

    from source

)

select * from renamed
