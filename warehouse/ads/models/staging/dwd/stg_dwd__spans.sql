with

source as (

    select * from {{ lake_source('dwd', 'span') }}

),

renamed as (

    -- The trace's shape only: the spans' own attributes and the users they name stay in DWD.
    select

        ----------  ids
        trace_id,
        span_id,
        parent_span_id,
        tenant_id,

        ----------  strings
        name as span_name,
        service,
        status,

        ----------  numerics
        duration_ms,

        ----------  timestamps
        ts as started_at,
        event_date

    from source

)

select * from renamed
